//! The documentation's links: every relative link of `README.md` and
//! `docs/*.md` names a file that exists, and an anchor names a heading of
//! that file (as GitHub makes anchors from headings).

mod common;

use common::markdown_files;
use std::collections::BTreeSet;
use std::path::Path;

/// GitHub's anchor of a heading: lower case, punctuation dropped but `-`
/// and `_`, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown file's headings (outside fenced code).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            let heading = line.trim_start_matches('#');
            if heading.starts_with(' ') {
                out.insert(anchor(heading));
            }
        }
    }
    out
}

/// The targets of `[text](target)` and `![alt](target)` links outside
/// fenced code, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push((n + 1, after[..end].to_string()));
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_of_the_docs_names_a_file_and_a_heading_that_exist() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            checked += 1;
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let named = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !named.exists() {
                broken.push(format!("{}:{line}: {target}: no such file", file.display()));
                continue;
            }
            if let Some(fragment) = fragment {
                let heads = anchors(&std::fs::read_to_string(&named).unwrap_or_default());
                if !heads.contains(fragment) {
                    broken.push(format!(
                        "{}:{line}: {target}: no such heading",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    assert!(checked >= 20, "only {checked} relative links found");
}

#[test]
fn the_readme_is_a_front_door() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; the rest goes to docs/"
    );
    for doc in [
        "api",
        "operators",
        "auditors",
        "benchmarks",
        "architecture",
        "decisions",
    ] {
        assert!(
            readme.contains(&format!("](docs/{doc}.md)")),
            "README.md does not link docs/{doc}.md"
        );
    }
}

#[test]
fn the_glossary_explains_every_code_an_answer_can_carry() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let glossary = std::fs::read_to_string(root.join("docs/glossary.md")).unwrap();
    let missing: Vec<&str> = agentledger::codes::Code::ALL
        .iter()
        .map(|c| c.as_str())
        .filter(|c| !glossary.contains(&format!("| `{c}` |")))
        .collect();
    assert!(missing.is_empty(), "docs/glossary.md lacks {missing:?}");
    for rule in 1..=16 {
        assert!(glossary.contains(&format!("| R{rule} |")), "R{rule}");
    }
}

#[test]
fn the_link_checker_finds_a_broken_link() {
    assert_eq!(anchor("Running on Kafka"), "running-on-kafka");
    assert_eq!(
        anchor("The ledger as a service: `serve --listen`"),
        "the-ledger-as-a-service-serve---listen"
    );
    let text = "# Title\n\n[a](#title) [b](#nowhere) ![c](pic.svg)\n```\n[d](#code)\n```\n";
    assert_eq!(
        links(text),
        vec![
            (3, "#title".to_string()),
            (3, "#nowhere".to_string()),
            (3, "pic.svg".to_string())
        ]
    );
    let heads = anchors(text);
    assert!(heads.contains("title") && !heads.contains("nowhere"));
}
