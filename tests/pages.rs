//! A chain you can see: `chain --format dot|svg` on the data dir and
//! through a server (the same bytes), the auditor's pages over HTTP (auth,
//! escaping, errors), and the demo's eight-hop chain loaded in a real
//! headless Chromium (`AGENTLEDGER_TEST_CHROMIUM`, installed by
//! `tools/test`): its DOM has nine run nodes and the withheld mark, and a
//! screenshot is saved under `target/screenshots/`.

mod common;

use common::server::{self, Server};
use std::path::{Path, PathBuf};
use std::process::Command;

fn token(url: &str) -> String {
    server::SESSIONS.lock().unwrap()[url].clone()
}

/// The `<g class="run …">` nodes of a picture or page.
fn run_nodes(doc: &str) -> usize {
    doc.matches("<g class=\"run ").count()
}

#[test]
fn chain_pictures_on_the_data_dir_and_through_a_server_are_the_same() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    common::demo(&dir);
    let (rc, svg, err) = common::cli(&dir, &["chain", "dev-0", "--format", "svg"]);
    assert_eq!(rc, 0, "{err}");
    assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
    assert_eq!(run_nodes(&svg), 9, "nine runs: hops 0 to 8");
    assert_eq!(svg.matches("<g class=\"withheld\"").count(), 1);
    assert!(svg.contains("hop limit 8"));
    let (rc, dot, _) = common::cli(&dir, &["chain", "dev-0", "--format", "dot"]);
    assert_eq!(rc, 0);
    assert!(dot.starts_with("digraph chain {"));
    assert!(dot.matches("\n  n").count() >= 9);
    assert!(dot.contains("withheld0") && dot.contains("(hop_limit)"));
    // The scope barrier and `untrusted` of the incident chain.
    let (_, inc, _) = common::cli(&dir, &["chain", "inc-1", "--format", "svg"]);
    assert_eq!(inc.matches("<g class=\"refused\"").count(), 1, "{inc}");
    assert!(inc.contains("scope_barrier"));
    assert!(
        inc.contains(" untrusted\""),
        "the responder carries untrusted"
    );
    // An unknown run is refused as for `chain`.
    let (rc, _, err) = common::cli(&dir, &["chain", "nope", "--format", "svg"]);
    assert_eq!(rc, 1);
    assert!(err.contains("unknown_run"), "{err}");

    let srv = server::start(&dir, None, &[]);
    for f in ["svg", "dot"] {
        let (rc, through, err) = common::cli(&dir, &["chain", "dev-0", "--format", f]);
        assert_eq!(rc, 0, "{err}");
        let direct = if f == "svg" { &svg } else { &dot };
        assert_eq!(&through, direct, "{f} through the server");
    }
    let r = server::http(&srv.url)
        .get(format!("{}/v1/runs/dev-0/chain?format=svg", srv.url))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/svg+xml");
    assert_eq!(r.text().unwrap(), svg);

    // The hop-8 chain fits a laptop's 1,280 px, its withheld mark inside.
    let width = number_after(&svg, "<svg", "width");
    assert!(width <= 1280, "the picture is {width} px wide");
    let mark = number_after(&svg, "<g class=\"withheld\"", "x");
    assert!(
        mark + 160 <= width,
        "the withheld mark at x={mark} of {width}"
    );
}

/// The number in attribute `name` of the first element from `from` on.
fn number_after(svg: &str, from: &str, name: &str) -> u32 {
    let rest = &svg[svg.find(from).unwrap_or_else(|| panic!("no {from}: {svg}"))..];
    let at = rest.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
    rest[at..].split('"').next().unwrap().parse().unwrap()
}

#[test]
fn pages_ask_for_the_token_and_escape_what_they_show() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    common::demo(&dir);
    let srv = server::start(&dir, None, &[]);
    let plain = reqwest::blocking::Client::new();
    // No credentials: a challenge a browser answers with a login prompt.
    let r = plain.get(format!("{}/", srv.url)).send().unwrap();
    assert_eq!(r.status(), 401);
    assert!(r.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .starts_with("Basic "));
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    // A wrong token is refused; the right one as the Basic password or as
    // a bearer token is let in.
    let r = plain
        .get(format!("{}/", srv.url))
        .basic_auth("auditor", Some("not-the-token"))
        .send()
        .unwrap();
    assert_eq!(r.status(), 401);
    for garbage in [
        "Basic !!!not-base64",
        "Basic",
        "Basic dXNlcm9ubHk=",
        "Digest x",
    ] {
        let r = plain
            .get(format!("{}/", srv.url))
            .header("authorization", garbage)
            .send()
            .unwrap();
        assert_eq!(r.status(), 401, "{garbage}");
    }
    let index = plain
        .get(format!("{}/", srv.url))
        .basic_auth("auditor", Some(token(&srv.url)))
        .send()
        .unwrap();
    assert_eq!(index.status(), 200);
    // The index says what its columns mean and links to the checks, which
    // answer the same Basic credentials.
    let index_text = plain
        .get(format!("{}/", srv.url))
        .basic_auth("auditor", Some(token(&srv.url)))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        index_text.contains("deepest hop it reached"),
        "{index_text}"
    );
    for link in ["/v1/verify?format=text", "/v1/status?format=text"] {
        assert!(
            index_text.contains(&format!("href=\"{link}\"")),
            "{index_text}"
        );
        let r = plain
            .get(format!("{}{link}", srv.url))
            .basic_auth("auditor", Some(token(&srv.url)))
            .send()
            .unwrap();
        assert_eq!(r.status(), 200, "{link}");
        let r = plain
            .get(format!("{}{link}", srv.url))
            .basic_auth("auditor", Some("not-the-token"))
            .send()
            .unwrap();
        assert_eq!(r.status(), 401, "{link}");
    }
    let index = index.text().unwrap();
    for chain in ["dev-0", "inc-1", "tour-master", "doctor-master"] {
        assert!(
            index.contains(&format!("href=\"/chains/{chain}\"")),
            "{chain} listed: {index}"
        );
    }
    let page = server::http(&srv.url)
        .get(format!("{}/chains/doctor-master", srv.url))
        .send()
        .unwrap();
    assert_eq!(page.status(), 200);
    let page = page.text().unwrap();
    // The see-a-doctor task: three subtasks, layer one failed on one,
    // every one accepted by the master, and the bytes chart.
    assert_eq!(page.matches("<tr class=\"subtask\">").count(), 3, "{page}");
    // The mode as the wire spells it.
    assert_eq!(page.matches("<td>sync</td>").count(), 3, "{page}");
    assert!(!page.contains("<td>Sync</td>"), "{page}");
    assert!(page.contains("failed: ContextItem"));
    assert_eq!(page.matches("accepted: ").count(), 3);
    assert_eq!(page.matches("<g class=\"bar\"").count(), 4);
    assert!(page.contains("data-verified=\"true\""), "{page}");
    assert!(!page.contains("<script"));
    // A chain that is not there: a page saying so, 404.
    let r = server::http(&srv.url)
        .get(format!("{}/chains/nope", srv.url))
        .send()
        .unwrap();
    assert_eq!(r.status(), 404);
    assert!(r.text().unwrap().contains("unknown_run"));
    // One that cannot be a name: 400, as the API says, and what was
    // asked is escaped.
    let r = server::http(&srv.url)
        .get(format!("{}/chains/%3Cb%3Enope", srv.url))
        .send()
        .unwrap();
    assert_eq!(r.status(), 400);
    let body = r.text().unwrap();
    assert!(body.contains("invalid_name") && body.contains("&lt;b&gt;nope"));
    assert!(!body.contains("<b>nope"), "the name is escaped: {body}");
    drop(srv);
}

/// Fails (never skips) without a browser.
fn chromium() -> String {
    match std::env::var("AGENTLEDGER_TEST_CHROMIUM") {
        Ok(v) if !v.trim().is_empty() => v,
        _ => panic!(
            "AGENTLEDGER_TEST_CHROMIUM is not set: run the tests with `tools/test` (it installs \
             Debian's chromium when missing and exports the variable), or export it yourself"
        ),
    }
}

/// Chromium, headless, as the machine allows it (root: no sandbox; no
/// background connections: the network is closed).
fn browser(profile: &Path) -> Command {
    let mut c = Command::new(chromium());
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

#[test]
fn the_demo_chain_in_a_real_browser() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    common::demo(&dir);
    let srv: Server = server::start(&dir, None, &[]);
    let host = srv.url.strip_prefix("http://").unwrap();
    let page = format!("http://auditor:{}@{host}/chains/dev-0", token(&srv.url));

    let out = browser(&tmp.path().join("profile"))
        .args(["--dump-dom", &page])
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dom.contains("<h1>Chain of dev-0</h1>"), "{dom}");
    assert_eq!(run_nodes(&dom), 9, "nine run nodes for the eight-hop chain");
    assert_eq!(dom.matches("<g class=\"withheld\"").count(), 1);
    assert!(dom.contains("class=\"hop-limit\""));
    // Each node links to its run's steps.
    for i in 0..9 {
        assert!(dom.contains(&format!("href=\"#run-{i}\"")));
        assert!(dom.contains(&format!("id=\"run-{i}\"")));
    }

    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let png = shots.join("chain-dev-0.png");
    let _ = std::fs::remove_file(&png);
    let out = browser(&tmp.path().join("profile"))
        .arg(format!("--screenshot={}", png.display()))
        .args(["--window-size=1500,1200", &page])
        .output()
        .unwrap();
    assert!(out.status.success());
    let bytes = std::fs::read(&png).expect("a screenshot");
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert!(
        bytes.len() > 20_000,
        "a page, not a blank: {} bytes",
        bytes.len()
    );
}
