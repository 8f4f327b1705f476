//! R10 tests: examples from the spec, bounds, and a property test against a
//! brute-force enumeration of every elementary loop.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::*;

fn agent(name: &str, scope: &str, listens: &[&str], emits: &[&str]) -> AgentNode {
    AgentNode::new(name, scope, listens.iter().copied(), emits.iter().copied())
}

fn access(scopes: &[&str]) -> Vec<String> {
    scopes.iter().map(|s| s.to_string()).collect()
}

fn loops_of(report: &LoopCheck) -> Vec<Vec<String>> {
    report
        .warnings
        .iter()
        .map(|w| w.loop_agents.clone())
        .collect()
}

fn strs(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// Every elementary loop through `cand`, by trying every simple path: the
/// obviously-correct reference the search is checked against. Real names,
/// in report order.
fn brute_force(agents: &[AgentNode], cand: &AgentNode) -> Vec<Vec<String>> {
    let mut graph: BTreeMap<String, AgentNode> = BTreeMap::new();
    for a in agents {
        graph.insert(a.name.clone(), a.clone());
    }
    graph.insert(cand.name.clone(), cand.clone());
    let feeds = |a: &AgentNode, b: &AgentNode| a.emits.iter().any(|e| b.listens.contains(e));

    fn walk(
        graph: &BTreeMap<String, AgentNode>,
        cand: &AgentNode,
        feeds: &dyn Fn(&AgentNode, &AgentNode) -> bool,
        path: &mut Vec<String>,
        out: &mut Vec<Vec<String>>,
    ) {
        let last = graph[path.last().unwrap()].clone();
        for (name, node) in graph {
            if *name == cand.name {
                if path.len() >= 2 && feeds(&last, cand) {
                    let mut cycle = path.clone();
                    cycle.push(cand.name.clone());
                    out.push(cycle);
                }
            } else if !path.contains(name) && feeds(&last, node) {
                path.push(name.clone());
                walk(graph, cand, feeds, path, out);
                path.pop();
            }
        }
    }

    let mut out = Vec::new();
    if feeds(cand, cand) {
        out.push(vec![cand.name.clone(), cand.name.clone()]);
    }
    walk(&graph, cand, &feeds, &mut vec![cand.name.clone()], &mut out);
    out.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
    out
}

/// Like [`brute_force`], but only the first loops in report order: every
/// loop up to the length at which more than `want` are known (or all of them).
/// `None` when that takes more than `step_limit` path extensions.
fn brute_force_first(
    agents: &[AgentNode],
    cand: &AgentNode,
    want: usize,
    step_limit: u64,
) -> Option<Vec<Vec<String>>> {
    let mut graph: BTreeMap<String, AgentNode> = BTreeMap::new();
    for a in agents {
        graph.insert(a.name.clone(), a.clone());
    }
    graph.insert(cand.name.clone(), cand.clone());
    let names: Vec<&String> = graph.keys().collect();
    let succ: Vec<Vec<usize>> = names
        .iter()
        .map(|a| {
            (0..names.len())
                .filter(|&j| {
                    names[j] != *a
                        && graph[*a]
                            .emits
                            .iter()
                            .any(|e| graph[names[j]].listens.contains(e))
                })
                .collect()
        })
        .collect();
    let c = names.iter().position(|n| **n == cand.name)?;
    let mut out = Vec::new();
    if cand.emits.iter().any(|e| cand.listens.contains(e)) {
        out.push(vec![cand.name.clone(), cand.name.clone()]);
    }
    let mut steps = 0u64;
    for len in 2..=names.len() {
        // Every simple path c → … of `len - 1` edges, then back to c.
        let mut stack: Vec<(usize, usize)> = vec![(c, 0)];
        let mut on_path = vec![false; names.len()];
        on_path[c] = true;
        while let Some(&mut (v, ref mut next)) = stack.last_mut() {
            if *next == succ[v].len() {
                on_path[v] = false;
                stack.pop();
                continue;
            }
            let w = succ[v][*next];
            *next += 1;
            steps += 1;
            if steps > step_limit {
                return None;
            }
            if stack.len() == len {
                if w == c {
                    out.push(
                        stack
                            .iter()
                            .map(|&(u, _)| names[u].clone())
                            .chain([cand.name.clone()])
                            .collect(),
                    );
                }
            } else if !on_path[w] {
                on_path[w] = true;
                stack.push((w, 0));
            }
        }
        if out.len() > want {
            break;
        }
    }
    out.sort_by(|a, b| a.len().cmp(&b.len()).then_with(|| a.cmp(b)));
    Some(out)
}

/// Applies the access rule to real-name loops.
fn masked(
    loops: &[Vec<String>],
    agents: &[AgentNode],
    cand: &AgentNode,
    access: &[String],
) -> Vec<Vec<String>> {
    let mut scope: BTreeMap<&str, &str> = BTreeMap::new();
    for a in agents {
        scope.insert(&a.name, &a.scope);
    }
    loops
        .iter()
        .map(|l| {
            l.iter()
                .map(|n| {
                    let readable = *n == cand.name
                        || access.iter().any(|s| scope_within(scope[n.as_str()], s));
                    if readable {
                        n.clone()
                    } else {
                        OUTSIDE_ACCESS.to_string()
                    }
                })
                .collect()
        })
        .collect()
}

/// A registry of `n` agents, each listening to and emitting `per_agent`
/// random events out of `events`, seeded so every run builds the same graph.
/// With n = 100k, events = 90k and 3 per agent it has about 1M edges.
pub(super) fn random_registry(
    n: usize,
    events: usize,
    per_agent: usize,
    seed: u64,
) -> Vec<AgentNode> {
    const SCOPES: [&str; 4] = ["acme/platform", "acme/finance", "globex/ops", "initech"];
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|i| {
            let pick = |rng: &mut StdRng| -> Vec<String> {
                (0..per_agent)
                    .map(|_| format!("ev-{}", rng.gen_range(0..events)))
                    .collect()
            };
            let listens = pick(&mut rng);
            let emits = pick(&mut rng);
            AgentNode {
                name: format!("agent-{i:06}"),
                scope: SCOPES[rng.gen_range(0..SCOPES.len())].to_string(),
                listens,
                emits,
            }
        })
        .collect()
}

/// The developer/reviewer pair from the spec.
fn dev_review() -> (AgentNode, AgentNode) {
    (
        agent(
            "developer",
            "acme/platform",
            &["review.done"],
            &["code.ready"],
        ),
        agent(
            "reviewer",
            "acme/platform",
            &["code.ready"],
            &["review.done"],
        ),
    )
}

#[test]
fn r10_developer_reviewer_loop_named_back_to_published() {
    let (developer, reviewer) = dev_review();
    let index: AgentIndex = [developer].into_iter().collect();
    let report = check_publish(
        &index,
        &reviewer,
        &access(&["acme"]),
        &LoopBounds::default(),
    );
    assert_eq!(
        loops_of(&report),
        vec![strs(&["reviewer", "developer", "reviewer"])]
    );
    assert_eq!(report.warnings[0].text, "reviewer → developer → reviewer");
    assert_eq!(report.warnings[0].note, None);
    assert!(!report.may_be_more);
    assert!(report.checked_in_full);
    assert_eq!(report.text, None);
}

#[test]
fn r10_loops_listed_shortest_first_then_by_name() {
    // p → {b, a, z}; b → p; a → c → p; z → p; a → p.
    let index: AgentIndex = [
        agent("b", "acme", &["p.out"], &["back"]),
        agent("a", "acme", &["p.out"], &["back", "a.out"]),
        agent("z", "acme", &["p.out"], &["back"]),
        agent("c", "acme", &["a.out"], &["back"]),
    ]
    .into_iter()
    .collect();
    let p = agent("p", "acme", &["back"], &["p.out"]);
    let report = check_publish(&index, &p, &access(&["acme"]), &LoopBounds::default());
    assert_eq!(
        loops_of(&report),
        vec![
            strs(&["p", "a", "p"]),
            strs(&["p", "b", "p"]),
            strs(&["p", "z", "p"]),
            strs(&["p", "a", "c", "p"]),
        ]
    );
}

#[test]
fn r10_same_report_under_shuffled_insertion() {
    let agents = random_registry(400, 300, 2, 7);
    let candidates: Vec<AgentNode> = [3usize, 57, 211, 399]
        .iter()
        .map(|&i| agents[i].clone())
        .collect();
    let bounds = [
        LoopBounds::default(),
        LoopBounds {
            max_loops: 3,
            max_work: 2_000,
        },
        LoopBounds {
            max_loops: 10,
            max_work: 60,
        },
        LoopBounds {
            max_loops: 50,
            max_work: 200_000,
        },
    ];
    let everyone = access(&["acme", "globex"]);
    let reference: AgentIndex = agents.iter().cloned().collect();
    for seed in 0..5u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut shuffled = agents.clone();
        shuffled.shuffle(&mut rng);
        let mut index = AgentIndex::new();
        for a in &shuffled {
            // An outdated version first, replaced by the current one: history
            // must not leak into the index.
            let mut old = a.clone();
            old.emits.push("stale".into());
            old.listens.reverse();
            index.upsert(old);
            let mut current = a.clone();
            current.listens.shuffle(&mut rng);
            index.upsert(current);
        }
        for cand in &candidates {
            for bounds in &bounds {
                assert_eq!(
                    check_publish(&index, cand, &everyone, bounds),
                    check_publish(&reference, cand, &everyone, bounds),
                    "seed {seed}, candidate {}",
                    cand.name
                );
            }
        }
    }
}

#[test]
fn r10_version_that_stops_listening_publishes_without_warning() {
    let (developer, reviewer) = dev_review();
    let index: AgentIndex = [developer, reviewer.clone()].into_iter().collect();
    // The current reviewer closes the loop…
    let before = check_publish(
        &index,
        &reviewer,
        &access(&["acme"]),
        &LoopBounds::default(),
    );
    assert_eq!(before.warnings.len(), 1);
    // …a version that no longer listens to code.ready does not, although the
    // index still holds the old version.
    let quiet = agent(
        "reviewer",
        "acme/platform",
        &["manual.request"],
        &["review.done"],
    );
    let after = check_publish(&index, &quiet, &access(&["acme"]), &LoopBounds::default());
    assert!(after.is_clean(), "{after:?}");
    assert_eq!(after.text, None);
}

#[test]
fn r10_loops_among_other_agents_are_not_named() {
    let (developer, reviewer) = dev_review();
    let index: AgentIndex = [developer, reviewer].into_iter().collect();
    // The newcomer listens to the loop's events but nothing returns to it.
    let observer = agent(
        "observer",
        "acme",
        &["code.ready", "review.done"],
        &["stats"],
    );
    let report = check_publish(
        &index,
        &observer,
        &access(&["acme"]),
        &LoopBounds::default(),
    );
    assert!(report.is_clean(), "{report:?}");
    // Same when it feeds the loop without being fed back.
    let feeder = agent("feeder", "acme", &[], &["code.ready"]);
    let report = check_publish(&index, &feeder, &access(&["acme"]), &LoopBounds::default());
    assert!(report.is_clean(), "{report:?}");
}

#[test]
fn r10_agents_outside_access_are_masked() {
    let index: AgentIndex = [
        agent("planner", "acme/platform", &["dev.out"], &["plan"]),
        agent("auditor", "globex/audit", &["plan"], &["audit"]),
    ]
    .into_iter()
    .collect();
    // The published agent is named even though it lives outside `access`.
    let dev = agent("developer", "initech", &["audit"], &["dev.out"]);
    let report = check_publish(&index, &dev, &access(&["acme"]), &LoopBounds::default());
    let expected = vec![strs(&["developer", "planner", OUTSIDE_ACCESS, "developer"])];
    assert_eq!(loops_of(&report), expected);
    assert_eq!(
        report.warnings[0].text,
        "developer → planner → an agent outside your access → developer"
    );
    // No access at all: the loop and its length are still reported.
    let report = check_publish(&index, &dev, &[], &LoopBounds::default());
    assert_eq!(
        loops_of(&report),
        vec![strs(&[
            "developer",
            OUTSIDE_ACCESS,
            OUTSIDE_ACCESS,
            "developer"
        ])]
    );
    // A sibling scope or a prefix that is not an ancestor grants nothing.
    let report = check_publish(
        &index,
        &dev,
        &access(&["acme/platformx", "glob"]),
        &LoopBounds::default(),
    );
    assert_eq!(
        loops_of(&report),
        vec![strs(&[
            "developer",
            OUTSIDE_ACCESS,
            OUTSIDE_ACCESS,
            "developer"
        ])]
    );
}

#[test]
fn r10_self_listen_named_alone_with_note() {
    let (developer, _) = dev_review();
    let reviewer = agent(
        "reviewer",
        "acme",
        &["code.ready", "review.done"],
        &["review.done"],
    );
    let index: AgentIndex = [developer].into_iter().collect();
    let report = check_publish(
        &index,
        &reviewer,
        &access(&["acme"]),
        &LoopBounds::default(),
    );
    assert_eq!(
        loops_of(&report),
        vec![
            strs(&["reviewer", "reviewer"]),
            strs(&["reviewer", "developer", "reviewer"])
        ]
    );
    let own = &report.warnings[0];
    assert_eq!(own.text, "reviewer → reviewer");
    let note = own.note.as_deref().expect("self-listen carries a note");
    assert!(
        note.contains("never starts an agent from its own event"),
        "{note}"
    );
    assert_eq!(report.warnings[1].note, None);

    // Alone in an empty registry, and even with no budget at all.
    let lonely = agent("echo", "x", &["ping"], &["ping"]);
    let bounds = LoopBounds {
        max_loops: 10,
        max_work: 0,
    };
    let report = check_publish(&AgentIndex::new(), &lonely, &[], &bounds);
    assert_eq!(loops_of(&report), vec![strs(&["echo", "echo"])]);
    assert!(report.checked_in_full);
}

#[test]
fn r10_hub_with_60_spokes_is_bounded() {
    let spokes: Vec<AgentNode> = (0..60)
        .map(|i| {
            agent(
                &format!("spoke-{i:02}"),
                "acme",
                &["hub.out"],
                &["spoke.out"],
            )
        })
        .collect();
    let index: AgentIndex = spokes.into_iter().collect();
    let hub = agent("hub", "acme", &["spoke.out"], &["hub.out"]);
    let report = check_publish(&index, &hub, &access(&["acme"]), &LoopBounds::default());
    assert_eq!(report.warnings.len(), 10);
    assert!(report.may_be_more);
    assert!(report.checked_in_full);
    assert!(report.text.as_deref().unwrap().contains("may be more"));
    let expected: Vec<Vec<String>> = (0..10)
        .map(|i| strs(&["hub", &format!("spoke-{i:02}"), "hub"]))
        .collect();
    assert_eq!(loops_of(&report), expected);

    // Exactly as many loops as the bound: nothing more to say.
    let bounds = LoopBounds {
        max_loops: 60,
        ..LoopBounds::default()
    };
    let report = check_publish(&index, &hub, &access(&["acme"]), &bounds);
    assert_eq!(report.warnings.len(), 60);
    assert!(!report.may_be_more);

    // Work bounds: every report is a prefix of the full list with honest
    // flags, and some budget stops part-way yet names the shortest loop.
    let full = loops_of(&report);
    let mut partial = 0;
    for max_work in (0..3_000).step_by(25) {
        let bounds = LoopBounds {
            max_loops: 60,
            max_work,
        };
        let report = check_publish(&index, &hub, &access(&["acme"]), &bounds);
        let got = loops_of(&report);
        assert_eq!(got[..], full[..got.len()]);
        assert_eq!(
            report.checked_in_full,
            !got.is_empty(),
            "{max_work} {report:?}"
        );
        // Stopping while looking for a 61st loop also says "may be more".
        assert!(report.may_be_more || got.len() == 60);
        if !got.is_empty() && got.len() < 60 {
            partial += 1;
            assert_eq!(got[0], strs(&["hub", "spoke-00", "hub"]));
        }
    }
    assert!(partial > 0);
}

#[test]
fn r10_tiny_budget_not_checked_in_full() {
    // A ring of 50 agents: the only loop is 50 long.
    let ring: Vec<AgentNode> = (0..50)
        .map(|i| {
            agent(
                &format!("ring-{i:02}"),
                "acme",
                &[&format!("e{i}")],
                &[&format!("e{}", (i + 1) % 50)],
            )
        })
        .collect();
    let index: AgentIndex = ring.iter().cloned().collect();
    let bounds = LoopBounds {
        max_loops: 10,
        max_work: 20,
    };
    let report = check_publish(&index, &ring[0], &access(&["acme"]), &bounds);
    assert!(report.warnings.is_empty());
    assert!(!report.checked_in_full);
    assert!(report.may_be_more);
    assert!(!report.is_clean());
    let text = report.text.expect("an unchecked version says so");
    assert!(text.contains("not checked in full"), "{text}");

    // With the default budget the whole ring is found.
    let report = check_publish(&index, &ring[0], &access(&["acme"]), &LoopBounds::default());
    assert_eq!(report.warnings.len(), 1);
    assert_eq!(report.warnings[0].loop_agents.len(), 51);
    assert!(!report.may_be_more && report.checked_in_full);
}

#[test]
fn r10_dense_component_stays_within_budget() {
    let n = 200;
    let agents: Vec<AgentNode> = (0..n)
        .map(|i| {
            let listens: Vec<String> = (0..n)
                .filter(|&j| j != i && (i * 7 + j) % 10 != 0)
                .map(|j| format!("d{j}"))
                .collect();
            AgentNode {
                name: format!("dense-{i:03}"),
                scope: "acme".into(),
                listens,
                emits: vec![format!("d{i}")],
            }
        })
        .collect();
    let index: AgentIndex = agents.iter().cloned().collect();
    let report = check_publish(
        &index,
        &agents[0],
        &access(&["acme"]),
        &LoopBounds::default(),
    );
    assert_eq!(report.warnings.len(), 10);
    assert!(report.warnings.iter().all(|w| w.loop_agents.len() == 3));
    assert!(report.may_be_more && report.checked_in_full);
}

#[test]
fn r10_scope_within_matches_ancestors_only() {
    assert!(scope_within("acme/platform", "acme"));
    assert!(scope_within("acme", "acme"));
    assert!(scope_within("acme/platform/ci", "acme/platform"));
    assert!(!scope_within("acmex", "acme"));
    assert!(!scope_within("acme", "acme/platform"));
    assert!(!scope_within("acme/finance", "acme/platform"));
    assert!(!scope_within("acme", ""));
}

#[test]
fn r10_odd_input_never_panics() {
    let mut index = AgentIndex::new();
    index.upsert(agent("", "", &[""], &[""]));
    index.upsert(agent("dup", "acme", &["x", "x", ""], &["x", "x"]));
    index.upsert(agent("dup", "acme", &["x", "x"], &["y", "y"]));
    index.upsert(agent("other", "acme", &["y"], &["x", "x"]));
    assert_eq!(index.remove("never-there"), None);
    assert_eq!(index.len(), 3);
    let cands = [
        agent("", "", &[], &[]),
        agent("", "", &[""], &["", "x"]),
        agent("dup", "acme", &["x", "x"], &["y", "y", "x"]),
        agent("new", "", &["unknown.event"], &["nobody.listens"]),
        agent("other", "acme", &["y", "y"], &["x"]),
    ];
    for cand in &cands {
        for bounds in [
            LoopBounds::default(),
            LoopBounds::unbounded(),
            LoopBounds {
                max_loops: 0,
                max_work: 0,
            },
            LoopBounds {
                max_loops: 0,
                max_work: 5,
            },
        ] {
            let report = check_publish(&index, cand, &access(&["", "acme"]), &bounds);
            assert!(report.warnings.len() <= bounds.max_loops.max(1));
        }
    }
    // dup ⇄ other, plus dup's own trigger, even with max_loops = 0.
    let report = check_publish(
        &index,
        &cands[2],
        &access(&["acme"]),
        &LoopBounds::unbounded(),
    );
    assert_eq!(
        loops_of(&report),
        vec![strs(&["dup", "dup"]), strs(&["dup", "other", "dup"])]
    );
    let bounds = LoopBounds {
        max_loops: 0,
        ..LoopBounds::default()
    };
    let report = check_publish(&index, &cands[2], &access(&["acme"]), &bounds);
    assert_eq!(loops_of(&report), vec![strs(&["dup", "dup"])]);
    assert!(report.may_be_more);
}

#[test]
fn r10_index_keeps_reverse_maps_consistent() {
    let (developer, reviewer) = dev_review();
    let mut index: AgentIndex = [developer.clone(), reviewer.clone()].into_iter().collect();
    assert_eq!(index.listeners("code.ready"), ["reviewer"]);
    assert_eq!(index.emitters("code.ready"), ["developer"]);
    let old = index.upsert(agent("reviewer", "acme", &["other"], &["review.done"]));
    assert_eq!(old, Some(reviewer));
    assert_eq!(index.listeners("code.ready").len(), 0);
    assert_eq!(index.listeners("other"), ["reviewer"]);
    assert_eq!(index.remove("developer"), Some(developer.clone()));
    assert_eq!(index.emitters("code.ready").len(), 0);
    assert_eq!(index.get("developer"), None);
    assert_eq!(index.len(), 1);
    assert!(!index.is_empty());
    // A retired agent no longer closes loops.
    let report = check_publish(&index, &developer, &[], &LoopBounds::default());
    assert!(report.is_clean());

    // Churn: slots and event ids are recycled, and the index answers exactly
    // like one built from scratch with the survivors.
    let mut rng = StdRng::seed_from_u64(3);
    let pool = random_registry(60, 20, 2, 11);
    let mut live: BTreeMap<String, AgentNode> = BTreeMap::new();
    for _ in 0..2_000 {
        let a = &pool[rng.gen_range(0..pool.len())];
        if rng.gen_bool(0.4) {
            assert_eq!(index.remove(&a.name), live.remove(&a.name));
        } else {
            let mut a = a.clone();
            a.emits.push(format!("ev-{}", rng.gen_range(0..30)));
            assert_eq!(index.upsert(a.clone()), live.insert(a.name.clone(), a));
        }
    }
    let fresh: AgentIndex = live.values().cloned().collect();
    assert_eq!(index.len(), fresh.len() + 1); // + the reviewer
    for e in 0..30 {
        let event = format!("ev-{e}");
        assert_eq!(index.listeners(&event), fresh.listeners(&event));
        assert_eq!(index.emitters(&event), fresh.emitters(&event));
    }
    index.remove("reviewer");
    let everyone = access(&["acme", "globex", "initech"]);
    for cand in pool.iter().take(20) {
        let bounds = LoopBounds {
            max_loops: 20,
            max_work: 100_000,
        };
        assert_eq!(
            check_publish(&index, cand, &everyone, &bounds),
            check_publish(&fresh, cand, &everyone, &bounds)
        );
    }
}

#[test]
fn r10_json_shape_matches_cli_contract() {
    let (developer, reviewer) = dev_review();
    let index: AgentIndex = [developer].into_iter().collect();
    let report = check_publish(
        &index,
        &reviewer,
        &access(&["acme"]),
        &LoopBounds::default(),
    );
    let json = serde_json::to_value(crate::protocol::LoopCheckOut::from(&report)).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "warnings": [{"loop": ["reviewer", "developer", "reviewer"],
                          "text": "reviewer → developer → reviewer"}],
            "may_be_more": false,
            "checked_in_full": true
        })
    );
}

const NAMES: [&str; 8] = ["ava", "bo", "cy", "dee", "eli", "fay", "gus", ""];
const SCOPES: [&str; 3] = ["acme/platform", "acme/finance", "globex"];
const ACCESS: [&str; 3] = ["acme", "acme/platform", "globex"];

fn arb_agent() -> impl Strategy<Value = AgentNode> {
    (
        0..NAMES.len(),
        0..SCOPES.len(),
        // Few events, so that most graphs have loops, often many.
        prop::collection::vec(0..5usize, 0..4),
        prop::collection::vec(0..5usize, 1..3),
    )
        .prop_map(|(n, s, listens, emits)| AgentNode {
            name: NAMES[n].to_string(),
            scope: SCOPES[s].to_string(),
            listens: listens.iter().map(|e| format!("e{e}")).collect(),
            emits: emits.iter().map(|e| format!("e{e}")).collect(),
        })
}

fn arb_access() -> impl Strategy<Value = Vec<String>> {
    (0u8..8).prop_map(|bits| {
        ACCESS
            .iter()
            .enumerate()
            .filter(|(i, _)| bits & (1 << i) != 0)
            .map(|(_, s)| s.to_string())
            .collect()
    })
}

/// Expected masked loops for a generated case; `agents` in insertion order.
fn expected(agents: &[AgentNode], cand: &AgentNode, access: &[String]) -> Vec<Vec<String>> {
    masked(&brute_force(agents, cand), agents, cand, access)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn r10_matches_brute_force_unbounded(
        agents in prop::collection::vec(arb_agent(), 0..12),
        cand in arb_agent(),
        access in arb_access(),
    ) {
        let index: AgentIndex = agents.iter().cloned().collect();
        let report = check_publish(&index, &cand, &access, &LoopBounds::unbounded());
        prop_assert_eq!(loops_of(&report), expected(&agents, &cand, &access));
        prop_assert!(!report.may_be_more);
        prop_assert!(report.checked_in_full);
        prop_assert_eq!(report.text, None);
        for w in &report.warnings {
            prop_assert_eq!(w.note.is_some(), w.loop_agents.len() == 2);
            prop_assert_eq!(&w.text, &w.loop_agents.join(" → "));
        }
    }

    #[test]
    fn r10_bounded_is_prefix_with_honest_flags(
        agents in prop::collection::vec(arb_agent(), 0..12),
        cand in arb_agent(),
        max_loops in 0usize..5,
        max_work in prop_oneof![0u64..400, Just(u64::MAX)],
    ) {
        let everyone = access(&["acme", "globex"]);
        let index: AgentIndex = agents.iter().cloned().collect();
        let bounds = LoopBounds { max_loops, max_work };
        let report = check_publish(&index, &cand, &everyone, &bounds);
        let full = expected(&agents, &cand, &everyone);
        let got = loops_of(&report);
        let cap = max_loops.max(1);

        prop_assert!(got.len() <= cap);
        prop_assert_eq!(&got[..], &full[..got.len()], "not a prefix");
        if !report.may_be_more {
            prop_assert_eq!(&got, &full, "complete report missed loops");
            prop_assert!(report.checked_in_full);
        }
        if !report.checked_in_full {
            prop_assert!(got.is_empty() && report.may_be_more);
            prop_assert!(report.text.as_deref().unwrap_or("").contains("not checked in full"));
        } else if !full.is_empty() {
            // Checked: the shortest loop is always named.
            prop_assert!(!got.is_empty());
        }
        prop_assert_eq!(report.text.is_some(), report.may_be_more);
        if max_work == u64::MAX {
            prop_assert!(report.checked_in_full);
            prop_assert_eq!(report.may_be_more, full.len() > cap);
            prop_assert_eq!(got.len(), full.len().min(cap));
        }
    }
}

/// A sparse registry of `n` agents over `events` events, for the larger
/// property test: long loops, both balls partial for many lengths.
fn arb_sparse_registry() -> impl Strategy<Value = (Vec<AgentNode>, AgentNode)> {
    (12usize..40).prop_flat_map(|n| {
        let events = n;
        let arb = move |i: usize| {
            (
                prop::collection::vec(0..events, 1..3),
                prop::collection::vec(0..events, 1..3),
            )
                .prop_map(move |(listens, emits)| AgentNode {
                    name: format!("n{:02}", (i * 7) % 41),
                    scope: "acme".to_string(),
                    listens: listens.iter().map(|e| format!("e{e}")).collect(),
                    emits: emits.iter().map(|e| format!("e{e}")).collect(),
                })
        };
        let agents: Vec<_> = (0..n).map(arb).collect();
        (agents, 0..n, arb(0)).prop_map(|(agents, pick, mut cand)| {
            cand.name = agents[pick].name.clone();
            (agents, cand)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn r10_matches_brute_force_on_larger_sparse_graphs(
        (agents, cand) in arb_sparse_registry(),
        max_loops in 1usize..15,
    ) {
        // A graph with too many paths for the reference is not a case: it
        // is replaced by another, so that all 256 cases compare (proptest
        // fails the test if it has to replace too many).
        let full = brute_force_first(&agents, &cand, max_loops, 3_000_000);
        prop_assume!(full.is_some(), "too many paths for the reference");
        let full = full.unwrap_or_default();
        let index: AgentIndex = agents.iter().cloned().collect();
        let everyone = access(&["acme"]);
        let bounds = LoopBounds { max_loops, max_work: u64::MAX };
        let report = check_publish(&index, &cand, &everyone, &bounds);
        let want = full.len().min(max_loops);
        prop_assert_eq!(loops_of(&report), full[..want].to_vec());
        prop_assert_eq!(report.may_be_more, full.len() > max_loops);
        prop_assert!(report.checked_in_full);

        // With a work bound: a prefix, honestly flagged.
        let bounds = LoopBounds { max_loops, max_work: 300 };
        let report = check_publish(&index, &cand, &everyone, &bounds);
        let got = loops_of(&report);
        prop_assert_eq!(&got[..], &full[..got.len()]);
        if got.len() < want {
            prop_assert!(report.may_be_more);
        }
    }
}
