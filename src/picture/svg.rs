//! A chain drawn as SVG with no renderer: one column per hop, runs in the
//! order they were opened, edges labelled with their event, the hop limit
//! a dashed line, withheld events and refused listeners dashed edges to a
//! marked box. Every mark carries a class (`run`, `edge`, `withheld`,
//! `refused`, `hop-limit`, `untrusted`) so a page can style it and a test
//! can count it.

use super::{dangling_label, ChainPicture, Dangling};
use std::collections::HashMap;
use std::fmt::Write as _;

const COL_W: u32 = 236;
const NODE_W: u32 = 152;
const NODE_H: u32 = 58;
const ROW_H: u32 = 82;
const LEFT: u32 = 16;
const TOP: u32 = 52;

pub use crate::encode::xml as escape;

/// At most `n` characters, with an ellipsis when cut.
fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

fn col_x(col: u32) -> u32 {
    LEFT + col * COL_W
}

fn row_y(row: u32) -> u32 {
    TOP + row * ROW_H
}

/// The chain as a standalone SVG document. `link` gives the href a run's
/// node points to (a page's anchor for its steps), by its index in
/// `p.runs`.
pub fn render(p: &ChainPicture, link: Option<&dyn Fn(usize) -> String>) -> String {
    // Place runs, then the marks of dangling edges one column right of
    // their run, under whatever that column already holds.
    let mut rows: HashMap<u32, u32> = HashMap::new();
    let mut at: HashMap<&str, (u32, u32)> = HashMap::new();
    for n in &p.runs {
        let col = ChainPicture::column(n);
        let row = rows.entry(col).or_insert(0);
        at.entry(n.run.as_str())
            .or_insert((col_x(col), row_y(*row)));
        *row += 1;
    }
    let mut marks = Vec::new();
    for d in &p.dangling {
        let Some(&(sx, _)) = at.get(d.from.as_str()) else {
            continue;
        };
        let col = (sx - LEFT) / COL_W + 1;
        let row = rows.entry(col).or_insert(0);
        marks.push((d, col_x(col), row_y(*row)));
        *row += 1;
    }
    let cols = rows.keys().max().map_or(1, |c| c + 1).max(p.hop_limit + 2);
    let height = TOP + rows.values().max().copied().unwrap_or(1).max(1) * ROW_H + 10;
    let width = LEFT * 2 + cols * COL_W - (COL_W - NODE_W);

    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" class="chain" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12" data-root="{root}">
<title>chain of {root}</title>
<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker>
<marker id="arrow-x" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#b02a37"/></marker></defs>
<rect width="100%" height="100%" fill="#ffffff"/>
"##,
        root = escape(&p.root)
    );
    for col in 0..cols {
        let head = if col > p.hop_limit {
            "past the limit".to_string()
        } else {
            format!("hop {col}")
        };
        let _ = writeln!(
            s,
            r##"<text class="hop-header" x="{}" y="22" fill="#666">{head}</text>"##,
            col_x(col) + 4
        );
    }
    let limit_x = col_x(p.hop_limit) + NODE_W + (COL_W - NODE_W) / 2;
    let _ = writeln!(
        s,
        r##"<g class="hop-limit"><line x1="{limit_x}" y1="8" x2="{limit_x}" y2="{}" stroke="#b02a37" stroke-width="2" stroke-dasharray="6 4"/><text x="{}" y="40" fill="#b02a37" font-weight="bold">hop limit {}</text></g>"##,
        height - 4,
        limit_x + 4,
        p.hop_limit
    );
    for e in &p.edges {
        let (Some(&(x1, y1)), Some(&(x2, y2))) = (at.get(e.from.as_str()), at.get(e.to.as_str()))
        else {
            continue;
        };
        edge(
            &mut s,
            "edge",
            (x1, y1),
            (x2, y2),
            &e.event,
            "#555",
            "arrow",
            false,
        );
    }
    for (d, x, y) in &marks {
        let Some(&from) = at.get(d.from.as_str()) else {
            continue;
        };
        let (class, label, title) = match &d.what {
            Dangling::Withheld { reason, events } => (
                "withheld",
                format!("withheld: {}", clip(&events.join(", "), 12)),
                reason,
            ),
            Dangling::Refused { agent, reason, .. } => {
                ("refused", format!("✗ {}", clip(agent, 18)), reason)
            }
        };
        let text = dangling_label(&d.what);
        let edge_label = match &d.what {
            Dangling::Withheld { events, .. } => events.join(", "),
            Dangling::Refused { event, .. } => event.clone(),
        };
        edge(
            &mut s,
            &format!("{class}-edge"),
            from,
            (*x, *y),
            &edge_label,
            "#b02a37",
            "arrow-x",
            true,
        );
        let _ = writeln!(
            s,
            r##"<g class="{class}" data-from="{from}"><title>{t}</title><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="8" fill="#fff" stroke="#b02a37" stroke-width="1.5" stroke-dasharray="5 3"/><text x="{tx}" y="{ty1}" fill="#b02a37" font-weight="bold">{label}</text><text x="{tx}" y="{ty2}" fill="#b02a37">{reason}</text></g>"##,
            from = escape(&d.from),
            t = escape(&text),
            tx = x + 8,
            ty1 = y + 22,
            ty2 = y + 40,
            label = escape(&label),
            reason = escape(title),
        );
    }
    for (i, n) in p.runs.iter().enumerate() {
        let Some(&(x, y)) = at.get(n.run.as_str()) else {
            continue;
        };
        let class = if n.untrusted {
            format!("run {} untrusted", n.status.as_str())
        } else {
            format!("run {}", n.status.as_str())
        };
        let (stroke, width) = if n.untrusted {
            ("#d9480f", 3)
        } else {
            ("#444", 1)
        };
        let hop = n.hop.map_or("?".to_string(), |h| h.to_string());
        let open = match link {
            Some(f) => format!(r#"<a href="{}">"#, escape(&f(i))),
            None => String::new(),
        };
        let close = if link.is_some() { "</a>" } else { "" };
        let _ = writeln!(
            s,
            r##"<g class="{class}" id="node-{i}" data-run="{run}" data-hop="{hop}" data-status="{status}">{open}<title>{run} — {agent} v{version}, hop {hop}, {status}{untrusted}</title><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="8" fill="{fill}" stroke="{stroke}" stroke-width="{width}"/><text x="{tx}" y="{ty1}" font-weight="bold">{agent_short} v{version}</text><text x="{tx}" y="{ty2}" fill="#333">{run_short}</text><text x="{tx}" y="{ty3}" fill="#555">hop {hop} · {status}{mark}</text>{close}</g>"##,
            run = escape(&n.run),
            agent = escape(&n.agent),
            version = n.version,
            status = n.status.as_str(),
            untrusted = if n.untrusted { ", untrusted" } else { "" },
            fill = n.status.fill(),
            tx = x + 8,
            ty1 = y + 18,
            ty2 = y + 34,
            ty3 = y + 50,
            agent_short = escape(&clip(&n.agent, 16)),
            run_short = escape(&clip(&n.run, 22)),
            mark = if n.untrusted { " · untrusted" } else { "" },
        );
    }
    s.push_str("</svg>\n");
    s
}

#[allow(clippy::too_many_arguments)]
fn edge(
    s: &mut String,
    class: &str,
    (x1, y1): (u32, u32),
    (x2, y2): (u32, u32),
    label: &str,
    colour: &str,
    marker: &str,
    dashed: bool,
) {
    let (ax, ay) = (x1 + NODE_W, y1 + NODE_H / 2);
    let (bx, by) = (x2, y2 + NODE_H / 2);
    let mid = (ax + bx) / 2;
    let dash = if dashed {
        r#" stroke-dasharray="5 3""#
    } else {
        ""
    };
    let _ = writeln!(
        s,
        r##"<g class="{class}"><path d="M{ax},{ay} C{mid},{ay} {mid},{by} {bx},{by}" fill="none" stroke="{colour}" stroke-width="1.5"{dash} marker-end="url(#{marker})"/><text x="{lx}" y="{ly}" font-size="10" fill="{colour}" text-anchor="middle">{label}</text></g>"##,
        lx = mid,
        ly = (ay + by) / 2 - 4,
        label = escape(&clip(label, 14)),
    );
}

#[cfg(test)]
mod tests {
    use super::super::tests::eight_hops;
    use super::*;

    #[test]
    fn draws_nine_runs_the_limit_and_each_mark() {
        let (runs, refusals) = eight_hops();
        let p = ChainPicture::of("r0", &runs, &refusals);
        let svg = render(&p, Some(&|i| format!("#run-{i}")));
        assert_eq!(svg.matches(r#"<g class="run "#).count(), 9, "{svg}");
        assert_eq!(svg.matches(r#"<g class="edge""#).count(), 8);
        assert_eq!(svg.matches(r#"<g class="withheld""#).count(), 1);
        assert_eq!(svg.matches(r#"<g class="refused""#).count(), 1);
        assert_eq!(svg.matches(r#"<g class="hop-limit""#).count(), 1);
        assert_eq!(svg.matches("untrusted\"").count(), 1);
        assert!(svg.contains(r##"href="#run-8""##));
        assert!(svg.contains("hop limit 8"));
    }

    #[test]
    fn names_are_escaped() {
        let (mut runs, _) = eight_hops();
        runs[1].agent = "<script>&\"x'".into();
        let svg = render(&ChainPicture::of("r0", &runs, &[]), None);
        assert!(!svg.contains("<script>"));
        assert!(svg.contains("&lt;script&gt;&amp;&quot;x&#39;"));
    }

    #[test]
    fn long_names_are_clipped_in_the_box_and_whole_in_the_title() {
        let (mut runs, _) = eight_hops();
        runs[0].agent = "a".repeat(40);
        let svg = render(&ChainPicture::of("r0", &runs, &[]), None);
        assert!(svg.contains(&format!("{}…", "a".repeat(15))));
        assert!(svg.contains(&"a".repeat(40)));
    }
}
