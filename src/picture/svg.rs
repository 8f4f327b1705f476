//! A chain drawn as SVG with no renderer: one row per hop from the root
//! down, runs of a hop side by side in the order they were opened
//! (wrapping onto another line past what fits), edges labelled with their
//! event, the hop limit a dashed line under its row, withheld events and
//! refused listeners dashed edges to a marked box in the next row. Rows
//! rather than columns so that a chain as deep as the limit fits a page's
//! width: at most [`MAX_WIDTH`] pixels whatever the chain. Every mark
//! carries a class (`run`, `edge`, `withheld`, `refused`, `hop-limit`,
//! `untrusted`) so a page can style it and a test can count it.

use super::{dangling_label, ChainPicture, Dangling};
use std::collections::HashMap;
use std::fmt::Write as _;

/// The widest the picture gets, in pixels (a laptop's screen).
pub const MAX_WIDTH: u32 = 1280;
const COL_W: u32 = 208;
const NODE_W: u32 = 184;
const NODE_H: u32 = 58;
const LINE_H: u32 = 100;
const LEFT: u32 = 16;
/// The column of the rows' names ("hop 3", "past the limit").
const GUTTER: u32 = 104;
const TOP: u32 = 44;
/// Boxes side by side in one line of a row.
const PER_LINE: u32 = (MAX_WIDTH - 2 * LEFT - GUTTER + (COL_W - NODE_W)) / COL_W;

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

/// Where each box goes: rows by hop, each as many lines as its boxes need.
struct Grid {
    /// Boxes in each row so far.
    filled: HashMap<u32, u32>,
}

impl Grid {
    /// The next free slot of `row`: (row, index in the row).
    fn take(&mut self, row: u32) -> (u32, u32) {
        let n = self.filled.entry(row).or_insert(0);
        *n += 1;
        (row, *n - 1)
    }

    fn last_row(&self) -> u32 {
        self.filled.keys().max().copied().unwrap_or(0)
    }

    fn lines(&self, row: u32) -> u32 {
        self.filled
            .get(&row)
            .map_or(1, |n| n.div_ceil(PER_LINE).max(1))
    }

    /// The top of each row, and the picture's height.
    fn tops(&self, until: u32) -> (Vec<u32>, u32) {
        let mut tops = Vec::new();
        let mut y = TOP;
        for row in 0..=until {
            tops.push(y);
            y += self.lines(row) * LINE_H;
        }
        (tops, y)
    }

    fn widest(&self) -> u32 {
        self.filled
            .values()
            .map(|n| (*n).min(PER_LINE))
            .max()
            .unwrap_or(1)
    }
}

/// The chain as a standalone SVG document. `link` gives the href a run's
/// node points to (a page's anchor for its steps), by its index in
/// `p.runs`.
pub fn render(p: &ChainPicture, link: Option<&dyn Fn(usize) -> String>) -> String {
    // Place runs by hop, then the marks of dangling edges one row under
    // their run, after whatever that row already holds.
    let mut grid = Grid {
        filled: HashMap::new(),
    };
    let mut slot: HashMap<&str, (u32, u32)> = HashMap::new();
    for n in &p.runs {
        let at = grid.take(ChainPicture::column(n));
        slot.entry(n.run.as_str()).or_insert(at);
    }
    let mut marks = Vec::new();
    for d in &p.dangling {
        let Some(&(row, _)) = slot.get(d.from.as_str()) else {
            continue;
        };
        marks.push((d, grid.take(row + 1)));
    }
    let last = grid.last_row();
    let (tops, height) = grid.tops(last);
    let at = |(row, i): (u32, u32)| {
        (
            LEFT + GUTTER + (i % PER_LINE) * COL_W,
            tops[row as usize] + (i / PER_LINE) * LINE_H,
        )
    };
    let width = (2 * LEFT + GUTTER + grid.widest() * COL_W - (COL_W - NODE_W)).max(440);
    let height = height + 8;

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
    for row in 0..=last {
        let head = if row > p.hop_limit {
            "past the limit".to_string()
        } else {
            format!("hop {row}")
        };
        let _ = writeln!(
            s,
            r##"<text class="hop-header" x="{LEFT}" y="{}" fill="#666">{head}</text>"##,
            tops[row as usize] + NODE_H / 2 + 4
        );
    }
    // The limit: a line under its row once the chain reaches past it,
    // else a word at the top saying how far the chain is from it.
    if last > p.hop_limit {
        let y = tops[p.hop_limit as usize + 1] - (LINE_H - NODE_H) / 2;
        let _ = writeln!(
            s,
            r##"<g class="hop-limit"><line x1="{LEFT}" y1="{y}" x2="{x2}" y2="{y}" stroke="#b02a37" stroke-width="2" stroke-dasharray="6 4"/><text x="{LEFT}" y="{ty}" fill="#b02a37" font-weight="bold">hop limit {limit}</text></g>"##,
            x2 = width - LEFT,
            ty = y - 6,
            limit = p.hop_limit
        );
    } else {
        let _ = writeln!(
            s,
            r##"<g class="hop-limit"><text x="{LEFT}" y="22" fill="#b02a37">hop limit {limit}: the chain reaches hop {deepest}</text></g>"##,
            limit = p.hop_limit,
            deepest = p.max_hop()
        );
    }
    for e in &p.edges {
        let (Some(&from), Some(&to)) = (slot.get(e.from.as_str()), slot.get(e.to.as_str())) else {
            continue;
        };
        edge(
            &mut s,
            "edge",
            at(from),
            at(to),
            &e.event,
            "#555",
            "arrow",
            false,
        );
    }
    for (d, place) in &marks {
        let Some(&from) = slot.get(d.from.as_str()) else {
            continue;
        };
        let (x, y) = at(*place);
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
            at(from),
            (x, y),
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
        let Some(&place) = slot.get(n.run.as_str()) else {
            continue;
        };
        let (x, y) = at(place);
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
    // From the bottom of one box to the top of the next, the label just
    // above the arrow's head: every box has one edge coming in, so no two
    // labels meet.
    let (ax, ay) = (x1 + NODE_W / 2, y1 + NODE_H);
    let (bx, by) = (x2 + NODE_W / 2, y2);
    let mid = (ay + by) / 2;
    let dash = if dashed {
        r#" stroke-dasharray="5 3""#
    } else {
        ""
    };
    let _ = writeln!(
        s,
        r##"<g class="{class}"><path d="M{ax},{ay} C{ax},{mid} {bx},{mid} {bx},{by}" fill="none" stroke="{colour}" stroke-width="1.5"{dash} marker-end="url(#{marker})"/><text x="{lx}" y="{ly}" font-size="10" fill="{colour}">{label}</text></g>"##,
        lx = bx + 6,
        ly = by - 6,
        label = escape(&clip(label, 18)),
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

    /// A number attribute of the first element after `from` in `svg`.
    pub(crate) fn attr(svg: &str, from: &str, name: &str) -> u32 {
        let rest = &svg[svg.find(from).unwrap_or_else(|| panic!("no {from}"))..];
        let at = rest.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
        rest[at..].split('"').next().unwrap().parse().unwrap()
    }

    #[test]
    fn a_chain_as_deep_as_the_limit_fits_a_laptops_width_with_its_withheld_mark() {
        let (runs, refusals) = eight_hops();
        let svg = render(&ChainPicture::of("r0", &runs, &refusals), None);
        let (width, height) = (attr(&svg, "<svg", "width"), attr(&svg, "<svg", "height"));
        assert!(width <= MAX_WIDTH, "{width} px wide");
        let x = attr(&svg, r#"<g class="withheld""#, "x");
        let y = attr(&svg, r#"<g class="withheld""#, "y");
        assert!(
            x + NODE_W <= width && y + NODE_H <= height,
            "{x},{y} in {width}x{height}"
        );
        // The limit's line lies between hop 8 and the withheld mark.
        let limit = attr(&svg, r#"<g class="hop-limit""#, "y1");
        let last_run = attr(&svg, r#"data-hop="8""#, "y");
        assert!(
            last_run + NODE_H < limit && limit < y,
            "{last_run} {limit} {y}"
        );
        assert!(svg.contains(">past the limit<"));
    }

    #[test]
    fn a_wide_hop_wraps_instead_of_growing_sideways() {
        let (mut runs, _) = eight_hops();
        runs.truncate(1);
        for i in 0..40 {
            runs.push(super::super::tests::run(
                &format!("fan{i}"),
                "worker",
                1,
                Some(("r0", "go")),
            ));
        }
        let svg = render(&ChainPicture::of("r0", &runs, &[]), None);
        let (width, height) = (attr(&svg, "<svg", "width"), attr(&svg, "<svg", "height"));
        assert!(width <= MAX_WIDTH, "{width} px wide");
        assert!(
            height >= TOP + (1 + 40u32.div_ceil(PER_LINE)) * LINE_H,
            "{height}"
        );
        assert_eq!(svg.matches(r#"<g class="edge""#).count(), 40);
        // A chain short of the limit says how far it got.
        assert!(
            svg.contains("hop limit 8: the chain reaches hop 1"),
            "{svg}"
        );
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
