//! The command line's own help: every example printed under "Examples:"
//! in `agentledger --help` and each command's `--help` runs as written,
//! in order, in a fresh directory (the first is the demo, whose ledger the
//! others read). An example that serves is stopped once it listens.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_agentledger");

fn help(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).arg("--help").output().unwrap();
    assert!(out.status.success(), "{args:?} --help: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The commands `agentledger --help` lists, but `help`.
fn commands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// The lines under "Examples:".
fn examples(text: &str) -> Vec<String> {
    text.lines()
        .skip_while(|l| !l.starts_with("Examples:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.trim().to_string())
        .collect()
}

/// `agentledger` at the start of the line or of a piped or chained
/// command, as the built binary.
fn as_run(example: &str) -> String {
    let mut out = String::new();
    for (i, part) in example.split(" | ").enumerate() {
        if i > 0 {
            out.push_str(" | ");
        }
        let chained: Vec<String> = part
            .split(" && ")
            .map(|c| match c.strip_prefix("agentledger ") {
                Some(rest) => format!("{BIN} {rest}"),
                None => c.replace("| agentledger ", &format!("| {BIN} ")),
            })
            .collect();
        out.push_str(&chained.join(" && "));
    }
    out
}

fn run(dir: &Path, example: &str) {
    let cmd = as_run(example.split("  #").next().unwrap().trim());
    if example.contains("serve ") {
        let mut child = Command::new("bash")
            .args(["-c", &format!("exec {cmd}")])
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let addr = dir.join("agentledger-demo/serve.addr");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !addr.exists() {
            assert!(Instant::now() < deadline, "{example}: never listened");
            assert!(child.try_wait().unwrap().is_none(), "{example}: exited");
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{example}: {out:?}");
        return;
    }
    let out = Command::new("bash")
        .args(["-c", &cmd])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{example}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_example_in_the_help_runs_as_written() {
    let top = help(&[]);
    let mut all = examples(&top);
    assert_eq!(all.first().map(String::as_str), Some("agentledger demo"));
    let mut with = 0;
    for c in commands(&top) {
        let ex = examples(&help(&[c.as_str()]));
        with += usize::from(!ex.is_empty());
        all.extend(ex);
    }
    assert!(with >= 15, "only {with} commands show examples");
    let d = tempfile::tempdir().unwrap();
    for example in &all {
        run(d.path(), example);
    }
}

#[test]
fn the_demo_plays_where_data_says_and_refuses_two_dirs() {
    let d = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["--data", "mine", "demo"])
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(d.path().join("mine/log").is_dir());
    assert!(!d.path().join("agentledger-demo").exists());
    let out = Command::new(BIN)
        .args(["--data", "mine", "demo", "--dir", "other"])
        .current_dir(d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("name two different dirs"), "{err}");
    assert!(!d.path().join("other").exists());
}

#[test]
fn a_command_on_an_empty_default_dir_points_at_the_demos() {
    let d = tempfile::tempdir().unwrap();
    let demo = Command::new(BIN)
        .arg("demo")
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(demo.status.success(), "{demo:?}");
    let out = Command::new(BIN)
        .args(["trail", "dev-0"])
        .env_remove("AGENTLEDGER_DATA")
        .current_dir(d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no ledger at") && err.contains("give --data ./agentledger-demo"),
        "{err}"
    );
    // Given explicitly, the dir is the caller's choice: no hint.
    let out = Command::new(BIN)
        .args(["--data", "./elsewhere", "trail", "dev-0"])
        .current_dir(d.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("give --data"), "{err}");
}
