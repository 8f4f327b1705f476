//! Every shell block of the README and of `docs/` runs as written, in the
//! order a newcomer reads them (the README, then `docs/` by name), in one
//! fresh directory with the built `agentledger` first on `PATH`.
//!
//! A shell block says what it is on its fence: ```` ```sh run ```` blocks
//! are run; ```` ```sh skip: WHY ```` blocks are not, and say why (a Kafka
//! cluster, secrets, the set-up commands themselves). A shell block with
//! neither mark fails the test, and so does a fence with no language: what
//! is left out is left out on purpose.
//!
//! Each command (a line; `\` continues it; a heredoc runs with its
//! command) runs in `bash` and must exit 0 and print no answer with
//! `"ok":false`. Three things are swapped so that the suite may run in
//! parallel: `--listen 127.0.0.1:8700` listens on a free port instead, and
//! `localhost:8700` in later commands names that port. A command ending in
//! `&` runs in the background (a `serve` is waited for until it listens)
//! and is stopped with SIGTERM at the end, which it must survive cleanly.
//! A command whose comment says it runs "until ctrl-c" is stopped after
//! two seconds and must have printed something by then.

mod common;

use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One fenced block: where it is, its fence's words, its text.
struct Block {
    file: String,
    line: usize,
    info: String,
    body: Vec<String>,
}

fn blocks(file: &str, text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(info) = line.strip_prefix("```").filter(|i| !i.starts_with('`')) {
            match open.take() {
                Some(b) => out.push(b),
                None => {
                    open = Some(Block {
                        file: file.to_string(),
                        line: i + 1,
                        info: info.trim().to_string(),
                        body: Vec::new(),
                    })
                }
            }
        } else if let Some(b) = open.as_mut() {
            b.body.push(line.to_string());
        }
    }
    assert!(open.is_none(), "{file}: a fence is never closed");
    out
}

/// The README, then `docs/*.md` by name.
fn all_blocks() -> Vec<Block> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    common::markdown_files()
        .iter()
        .flat_map(|p| {
            let name = p.strip_prefix(root).unwrap().display().to_string();
            blocks(&name, &std::fs::read_to_string(p).unwrap())
        })
        .collect()
}

const SHELLS: [&str; 4] = ["sh", "bash", "shell", "console"];

/// Whether a block is to run: `Some(true)` run, `Some(false)` skipped on
/// purpose, `None` not a shell block.
fn marked(b: &Block) -> Option<bool> {
    let mut words = b.info.splitn(2, ' ');
    let lang = words.next().unwrap_or("");
    assert!(
        !lang.is_empty(),
        "{}:{}: a fence with no language; say `text`, `sh run` or `sh skip: why`",
        b.file,
        b.line
    );
    if !SHELLS.contains(&lang) {
        return None;
    }
    let mark = words.next().unwrap_or("").trim();
    if mark == "run" {
        return Some(true);
    }
    match mark.strip_prefix("skip:") {
        Some(why) if why.trim().len() >= 10 => Some(false),
        _ => panic!(
            "{}:{}: a shell block says neither `run` nor `skip: why` (```{})",
            b.file, b.line, b.info
        ),
    }
}

/// One command of a block and its comment.
#[derive(Debug)]
struct Cmd {
    text: String,
    comment: String,
}

/// The comment after a command: `  # …` (two spaces at least before it,
/// so that a `#` inside a command's quotes is left alone).
fn split_comment(line: &str) -> (String, String) {
    match line.find("  #") {
        Some(at) => (
            line[..at].trim_end().to_string(),
            line[at..].trim().trim_start_matches('#').trim().to_string(),
        ),
        None => (line.trim_end().to_string(), String::new()),
    }
}

fn commands(b: &Block) -> Vec<Cmd> {
    let mut out = Vec::new();
    let mut lines = b.body.iter();
    while let Some(first) = lines.next() {
        if first.trim().is_empty() || first.trim_start().starts_with('#') {
            continue;
        }
        let (mut text, mut comment) = split_comment(first);
        // `\` continues the command on the next line.
        while text.ends_with('\\') {
            text.pop();
            let (more, c) = split_comment(lines.next().expect("a `\\` on the last line"));
            text.push(' ');
            text.push_str(more.trim());
            if !c.is_empty() {
                comment = c;
            }
        }
        // A heredoc: its lines, up to its word, belong to the command.
        if let Some(at) = text.find("<<") {
            let word: String = text[at + 2..]
                .trim_start_matches('-')
                .trim_matches(|c: char| c == '\'' || c == '"' || c.is_whitespace())
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            for l in lines.by_ref() {
                text.push('\n');
                text.push_str(l);
                if l.trim() == word {
                    break;
                }
            }
        }
        out.push(Cmd { text, comment });
    }
    out
}

/// The place the commands run, with what they started.
struct Reader {
    dir: PathBuf,
    path: String,
    /// Where `localhost:8700` listens once a server was started.
    addr: Option<String>,
    background: Vec<(String, Child)>,
}

impl Reader {
    fn new(dir: &Path) -> Reader {
        let bin = Path::new(env!("CARGO_BIN_EXE_agentledger"));
        let path = format!(
            "{}:{}",
            bin.parent().unwrap().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Reader {
            dir: dir.to_path_buf(),
            path,
            addr: None,
            background: Vec::new(),
        }
    }

    fn bash(&self, text: &str) -> Command {
        let mut c = Command::new("bash");
        c.args(["-o", "pipefail", "-c", text])
            .current_dir(&self.dir)
            .env("PATH", &self.path)
            .env_remove("AGENTLEDGER_TOKEN")
            .env_remove("RUST_LOG");
        c
    }

    fn swapped(&self, text: &str) -> String {
        let text = text.replace("--listen 127.0.0.1:8700", "--listen 127.0.0.1:0");
        match &self.addr {
            Some(addr) => text
                .replace("localhost:8700", addr)
                .replace("127.0.0.1:8700", addr),
            None => text,
        }
    }

    fn run(&mut self, at: &str, cmd: &Cmd) {
        let text = self.swapped(&cmd.text);
        if let Some(bg) = text.strip_suffix('&') {
            return self.start(at, bg.trim());
        }
        let mut child = self
            .bash(&text)
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let status = if cmd.comment.contains("until ctrl-c") {
            std::thread::sleep(Duration::from_secs(2));
            match child.try_wait().unwrap() {
                Some(s) => Some(s),
                None => {
                    // The whole group: bash and what it started.
                    let _ = Command::new("kill")
                        .args(["-KILL", "--", &format!("-{}", child.id())])
                        .status();
                    None
                }
            }
        } else {
            None
        };
        let out = child.wait_with_output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let said = format!(
            "{at}: `{}`\n--- stdout\n{stdout}\n--- stderr\n{}",
            cmd.text,
            String::from_utf8_lossy(&out.stderr)
        );
        match status {
            // Stopped while it followed: it must have shown something.
            None if cmd.comment.contains("until ctrl-c") => {
                assert!(!stdout.trim().is_empty(), "printed nothing in 2 s: {said}")
            }
            _ => assert!(out.status.success(), "exited {:?}: {said}", out.status),
        }
        for line in stdout.lines() {
            if let Ok(v) = serde_json::from_str::<Value>(line) {
                assert!(v["ok"] != Value::Bool(false), "a refusal: {said}");
            }
        }
    }

    /// A background command; a `serve` is waited for until it listens.
    fn start(&mut self, at: &str, text: &str) {
        let log = self
            .dir
            .join(format!("background-{}.log", self.background.len()));
        let file = std::fs::File::create(&log).unwrap();
        let child = self
            .bash(&format!("exec {text}"))
            .stdout(Stdio::from(file.try_clone().unwrap()))
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap();
        self.background.push((at.to_string(), child));
        if !text.contains(" serve") {
            return;
        }
        let data = text
            .split_whitespace()
            .skip_while(|w| *w != "--data")
            .nth(1)
            .unwrap_or("./agentledger-data");
        let addr_file = self.dir.join(data).join("serve.addr");
        let deadline = Instant::now() + Duration::from_secs(60);
        let addr = loop {
            if let Ok(a) = std::fs::read_to_string(&addr_file) {
                if !a.trim().is_empty() {
                    break a.trim().to_string();
                }
            }
            let (_, child) = self.background.last_mut().unwrap();
            assert!(
                child.try_wait().unwrap().is_none() && Instant::now() < deadline,
                "{at}: `{text}` never listened: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        self.addr = Some(
            addr.trim_start_matches("http://")
                .trim_end_matches('/')
                .to_string(),
        );
    }

    /// Stop what runs in the background: each must end cleanly.
    fn stop(&mut self) {
        for (at, mut child) in self.background.drain(..) {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let status = child.wait().unwrap();
            assert!(status.success(), "{at}: stopped with SIGTERM: {status}");
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        for (_, child) in &mut self.background {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[test]
fn every_runnable_block_of_the_readme_and_docs_runs_in_order() {
    let all = all_blocks();
    let runnable: Vec<&Block> = all.iter().filter(|b| marked(b) == Some(true)).collect();
    let skipped = all.iter().filter(|b| marked(b) == Some(false)).count();
    assert!(runnable.len() >= 5, "{} runnable blocks", runnable.len());
    let d = tempfile::tempdir().unwrap();
    let mut reader = Reader::new(d.path());
    let mut ran = 0;
    for b in &runnable {
        for (i, cmd) in commands(b).iter().enumerate() {
            reader.run(&format!("{}:{} command {}", b.file, b.line, i + 1), cmd);
            ran += 1;
        }
    }
    reader.stop();
    eprintln!(
        "{ran} commands of {} blocks ran; {skipped} blocks skipped on purpose",
        runnable.len()
    );
}

/// The harness itself: a refusal, a failing command and an unmarked block
/// each fail it.
#[test]
fn the_harness_catches_what_it_is_for() {
    let unmarked = blocks("x.md", "```sh\nagentledger demo\n```\n");
    assert!(std::panic::catch_unwind(|| marked(&unmarked[0])).is_err());
    let bare = blocks("x.md", "```\npicture\n```\n");
    assert!(std::panic::catch_unwind(|| marked(&bare[0])).is_err());
    let short = blocks("x.md", "```sh skip: no\nx\n```\n");
    assert!(std::panic::catch_unwind(|| marked(&short[0])).is_err());

    let b = blocks(
        "x.md",
        "```sh run\ncat <<'OPS' | wc -l   # two\na\nb\nOPS\necho one \\\n  two   # joined\n```\n",
    );
    let cmds = commands(&b[0]);
    assert_eq!(cmds.len(), 2, "{cmds:?}");
    assert_eq!(cmds[0].text, "cat <<'OPS' | wc -l\na\nb\nOPS");
    assert_eq!(cmds[1].text, "echo one  two");
    assert_eq!(cmds[1].comment, "joined");

    let d = tempfile::tempdir().unwrap();
    let refusal = Cmd {
        text: r#"echo '{"ok":false,"error":{"code":"run_exists"}}'"#.into(),
        comment: String::new(),
    };
    let failing = Cmd {
        text: "false".into(),
        comment: String::new(),
    };
    for cmd in [refusal, failing] {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Reader::new(d.path()).run("x.md:1", &cmd)
        }));
        assert!(caught.is_err(), "{cmd:?} passed");
    }
}
