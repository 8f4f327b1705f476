//! A chain as Graphviz DOT, for `dot -Tsvg` or any tool that reads it: the
//! same marks as the SVG — runs ranked by hop, the hop limit a dashed
//! boundary node, withheld events and refused listeners dashed red edges to
//! plain-text marks.

use super::{dangling_label, ChainPicture, Dangling};
use std::fmt::Write as _;

/// A DOT double-quoted string.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub fn render(p: &ChainPicture) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "digraph chain {{");
    let _ = writeln!(s, "  label={};", quoted(&format!("chain of {}", p.root)));
    let _ = writeln!(
        s,
        "  rankdir=LR;\n  node [shape=box, style=\"rounded,filled\", fontname=\"sans-serif\"];\n  edge [fontname=\"sans-serif\", fontsize=10];"
    );
    for (i, n) in p.runs.iter().enumerate() {
        let hop = n.hop.map_or("?".to_string(), |h| h.to_string());
        let label = format!(
            "{} v{}\n{}\nhop {hop} · {}{}",
            n.agent,
            n.version,
            n.run,
            n.status.as_str(),
            if n.untrusted { " · untrusted" } else { "" }
        );
        let extra = if n.untrusted {
            ", color=\"#d9480f\", penwidth=3"
        } else {
            ""
        };
        let _ = writeln!(
            s,
            "  n{i} [label={}, fillcolor=\"{}\", tooltip={}{extra}];",
            quoted(&label),
            n.status.fill(),
            quoted(&n.run)
        );
    }
    let index = |run: &str| p.runs.iter().position(|n| n.run == run);
    // Runs of one hop side by side; the limit after the last allowed hop.
    for hop in 0..=p.max_hop() {
        let same: Vec<String> = (0..p.runs.len())
            .filter(|&i| ChainPicture::column(&p.runs[i]) == hop)
            .map(|i| format!("n{i}"))
            .collect();
        if !same.is_empty() {
            let _ = writeln!(s, "  {{ rank=same; {}; }}", same.join("; "));
        }
    }
    let _ = writeln!(
        s,
        "  hop_limit [shape=plaintext, style=\"\", fontcolor=\"#b02a37\", label={}];",
        quoted(&format!("┆ hop limit {} ┆", p.hop_limit))
    );
    if let Some(last) = p
        .runs
        .iter()
        .position(|n| ChainPicture::column(n) == p.hop_limit)
    {
        let _ = writeln!(
            s,
            "  n{last} -> hop_limit [style=dashed, color=\"#b02a37\", arrowhead=none];"
        );
    }
    for e in &p.edges {
        if let (Some(a), Some(b)) = (index(&e.from), index(&e.to)) {
            let _ = writeln!(s, "  n{a} -> n{b} [label={}];", quoted(&e.event));
        }
    }
    for (k, d) in p.dangling.iter().enumerate() {
        let Some(a) = index(&d.from) else { continue };
        let (class, edge_label) = match &d.what {
            Dangling::Withheld { events, .. } => ("withheld", events.join(", ")),
            Dangling::Refused { event, .. } => ("refused", event.clone()),
        };
        let _ = writeln!(
            s,
            "  {class}{k} [shape=plaintext, style=\"\", fontcolor=\"#b02a37\", label={}];",
            quoted(&dangling_label(&d.what))
        );
        let _ = writeln!(
            s,
            "  n{a} -> {class}{k} [style=dashed, color=\"#b02a37\", label={}];",
            quoted(&edge_label)
        );
    }
    let _ = writeln!(s, "}}");
    s
}

#[cfg(test)]
mod tests {
    use super::super::tests::eight_hops;
    use super::*;

    #[test]
    fn has_a_node_per_run_an_edge_per_event_and_the_marks() {
        let (runs, refusals) = eight_hops();
        let dot = render(&ChainPicture::of("r0", &runs, &refusals));
        assert!(dot.starts_with("digraph chain {"));
        assert!(dot.trim_end().ends_with('}'));
        for i in 0..9 {
            assert!(dot.contains(&format!("  n{i} [label=")), "{dot}");
        }
        assert_eq!(dot.matches("[label=\"changed\"]").count(), 8);
        assert!(dot.contains("withheld0 [shape=plaintext"));
        assert!(dot.contains("refused1 [shape=plaintext"));
        assert!(dot.contains("billing-watch (scope_barrier)"));
        assert!(dot.contains("n8 -> hop_limit"));
        assert!(dot.contains("penwidth=3"));
    }

    #[test]
    fn quotes_are_escaped() {
        let (mut runs, _) = eight_hops();
        runs[0].agent = "a\"b\\c\nd".into();
        let dot = render(&ChainPicture::of("r0", &runs, &[]));
        assert!(dot.contains(r#"a\"b\\c\nd v1"#), "{dot}");
    }
}
