//! Tests of the auditor's pages as rendered.

use super::*;
use crate::picture::tests::eight_hops;
use crate::server::pages::render::bytes_chart;

fn sample() -> ChainPage {
    let (runs, refusals) = eight_hops();
    let picture = ChainPicture::of("r0", &runs, &refusals);
    let steps = (0..9).map(|i| vec![format!("step of r{i} <b>")]).collect();
    ChainPage {
        picture,
        steps,
        tasks: vec![("t-gone".into(), TaskView::Unreadable("erased at X".into()))],
        partition: 0,
        attestation: Attestation {
            note: Some("agentledger/x/ledger/0\n3\nabc=\n\n— k sig\n".into()),
            witnessed: None,
            verdict: Some(Verdict::Verified("37 records verified".into())),
        },
    }
}

#[test]
fn a_chain_page_has_its_picture_trail_tasks_and_checkpoint() {
    let html = render_chain(&sample());
    assert!(html.starts_with("<!doctype html>"));
    assert_eq!(html.matches("<g class=\"run ").count(), 9);
    assert_eq!(html.matches("class=\"run-steps\"").count(), 9);
    assert!(html.contains("href=\"#run-8\"") && html.contains("id=\"run-8\""));
    assert!(html.contains("<g class=\"withheld\""));
    assert!(
        html.contains("step of r3 &lt;b&gt;"),
        "step text is escaped"
    );
    assert!(html.contains("data-task=\"t-gone\"") && html.contains("erased at X"));
    assert!(html.contains("data-verified=\"true\""));
    assert!(html.contains("agentledger/x/ledger/0"));
    assert!(!html.contains("<script"), "no script on the page");
    assert!(
        !html.contains("http://") || !html.contains("src=\"http"),
        "nothing fetched"
    );
}

#[test]
fn the_bytes_chart_scales_bars_to_the_largest() {
    let svg = bytes_chart(&[("s1".into(), 100, 300), ("s2".into(), 50, 0)]);
    assert_eq!(svg.matches("<g class=\"bar\"").count(), 3);
    assert!(svg.contains("data-subtask=\"all\" data-inline=\"150\" data-referenced=\"300\""));
    // The largest bar (all: 300 referenced) is the full width.
    assert!(svg.contains("width=\"320\" height=\"12\" fill=\"#adb5bd\""));
}

#[test]
fn the_index_links_each_chain_escaped() {
    let html = render_index(&[ChainRow {
        root: "a b/<c>".into(),
        runs: 3,
        max_hop: 2,
        withheld: true,
        last_ms: 0,
    }]);
    assert!(html.contains("href=\"/chains/a%20b%2F%3Cc%3E\""));
    assert!(html.contains(">a b/&lt;c&gt;</a>"));
    assert_eq!(render_index(&[]).matches("No chain").count(), 1);
}
