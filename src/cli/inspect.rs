//! Read-only commands: trail, chain, agent, status, stats. The answers are
//! `agentledger::queries`'; this prints them, from the data dir or through
//! the server that owns it.

use super::args::Cli;
use super::open::open_engine_read_only;
use agentledger::queries::{self, Query, Said};
use anyhow::{Context as _, Result};
use std::io::Write as _;

/// Print what a question's answer says and give its exit code.
pub fn print(said: &Said) -> Result<i32> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    out.write_all(said.out.as_bytes())?;
    out.flush()?;
    if let Some(line) = said.error_line() {
        eprintln!("{line}");
    }
    Ok(said.exit_code())
}

/// Answer `q` through the server that owns the data dir, if one does, else
/// from the data dir itself.
pub fn ask(cli: &Cli, q: Query) -> Result<i32> {
    ask_with(cli, q, cli.json)
}

/// [`ask`], writing what it answers to `file` (`-`: stdout).
pub fn write_to(cli: &Cli, q: Query, file: &std::path::Path) -> Result<i32> {
    if file.as_os_str() == "-" {
        return ask_with(cli, q, true);
    }
    let said = match super::remote::server_for(cli)? {
        Some(server) => server.query(&q, true)?,
        None => queries::answer(&mut open_engine_read_only(cli)?, &q, true)?,
    };
    if said.failure.is_none() {
        std::fs::write(file, said.out.as_bytes())
            .with_context(|| format!("writing {}", file.display()))?;
        eprintln!("agentledger: wrote {}", file.display());
    }
    if let Some(line) = said.error_line() {
        eprintln!("{line}");
    }
    Ok(said.exit_code())
}

/// [`ask`], as JSON or not whatever `--json` says.
pub fn ask_with(cli: &Cli, q: Query, json: bool) -> Result<i32> {
    if let Some(server) = super::remote::server_for(cli)? {
        return print(&server.query(&q, json)?);
    }
    let mut engine = open_engine_read_only(cli)?;
    print(&queries::answer(&mut engine, &q, json)?)
}
