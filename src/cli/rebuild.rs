//! `agentledger gc` and `agentledger rebuild`: collecting unreferenced
//! content, and rebuilding the views from the log (in place or through a
//! running server) with progress on a terminal.

use super::args::Cli;
use super::open::{kafka_config, open_engine, options};
use agentledger::engine::DataDir;
use agentledger::log::embedded::EmbeddedLog;
use agentledger::log::kafka::KafkaLog;
use agentledger::log::Log;
use anyhow::{Context, Result};

pub(super) fn gc(cli: &Cli, grace_secs: u64) -> Result<i32> {
    let mut engine = open_engine(cli)?;
    let r = engine.sweep_content(std::time::Duration::from_secs(grace_secs))?;
    engine.flush()?;
    if cli.json {
        let mut answer = serde_json::json!({"ok": true, "examined": r.examined, "kept": r.kept,
            "in_grace": r.in_grace, "removed": r.removed, "removed_bytes": r.removed_bytes});
        if let Some(s) = &r.shared {
            answer["shared"] = serde_json::json!({"examined": s.examined, "removed": s.removed});
        }
        outln!("{answer}");
    } else {
        outln!(
            "content store: {} blobs, {} held by live references, {} unreferenced but newer than {grace_secs}s; removed {} ({} bytes)",
            r.examined, r.kept, r.in_grace, r.removed, r.removed_bytes
        );
        if let Some(s) = &r.shared {
            outln!(
                "shared content (blobs topic): {} blobs, {} no live reference holds ended with tombstones",
                s.examined, s.removed
            );
        }
    }
    Ok(0)
}

pub(super) fn rebuild(cli: &Cli) -> Result<i32> {
    // A server owns the data dir: build beside its live views instead.
    if let Some(server) = super::remote::server_for(cli)? {
        return rebuild_through(cli, &server);
    }
    let dd = DataDir::new(&cli.data);
    let _lock = dd.lock()?;
    let opts = options(cli)?;
    let log: Box<dyn Log> = match kafka_config(cli)? {
        Some(k) => Box::new(KafkaLog::connect(&k)?),
        None => Box::new(EmbeddedLog::open(dd.log(), &opts.embedded)?),
    };
    let log = log.as_ref();
    let total = agentledger::rebuild::projected_records(log)?;
    let bar = progress_bar(cli, total, "rebuilding");
    let started = std::time::Instant::now();
    let report = agentledger::rebuild::rebuild_views(&dd, log, &|n| bar.inc(n))?;
    bar.finish_and_clear();
    print_rebuild(
        cli,
        report.records,
        started.elapsed().as_secs_f64(),
        &report.digest,
        report.previous_digest.as_deref(),
    )?;
    Ok(0)
}

/// `rebuild` while a server owns the data dir: ask it to build fresh
/// views beside the live ones, follow the build, and print what the
/// offline rebuild prints once the server swapped them in.
pub(super) fn rebuild_through(cli: &Cli, server: &super::remote::Server) -> Result<i32> {
    use agentledger::rebuild::beside::{RebuildState, RebuildStatus};
    let status_of = |body: &[u8]| -> Result<RebuildStatus> {
        let v: serde_json::Value = serde_json::from_slice(body)
            .with_context(|| format!("the server answered {:?}", String::from_utf8_lossy(body)))?;
        serde_json::from_value(v["rebuild"].clone())
            .with_context(|| format!("the server answered {v} (no rebuild)"))
    };
    let (code, text) = server.post_text("/v1/rebuild", String::new())?;
    if code != 200 {
        let why = serde_json::from_str::<agentledger::protocol::Failure>(&text)
            .map(|f| f.error.message)
            .unwrap_or(text);
        anyhow::bail!(
            "the server at {} did not start the rebuild (HTTP {code}): {why}",
            server.url()
        );
    }
    let first = status_of(text.as_bytes())?;
    let bar = progress_bar(cli, first.total, "rebuilding beside the live views");
    let mut st = first.clone();
    while st.state == RebuildState::Running {
        std::thread::sleep(std::time::Duration::from_millis(200));
        let body = server
            .fetch("/v1/rebuild")?
            .context("the server no longer answers /v1/rebuild")?;
        st = status_of(&body)?;
        if st.id != first.id || st.started_at_ms != first.started_at_ms {
            anyhow::bail!("the server restarted while rebuilding; run rebuild again");
        }
        bar.set_position(st.projected);
    }
    bar.finish_and_clear();
    match st.state {
        RebuildState::Failed => anyhow::bail!(
            "the rebuild failed on the server: {}; the live views are unchanged",
            st.error.as_deref().unwrap_or("no reason given")
        ),
        _ => {
            let digest = st.digest.clone().unwrap_or_default();
            print_rebuild(
                cli,
                st.projected,
                st.seconds,
                &digest,
                st.previous_digest.as_deref(),
            )?;
            Ok(0)
        }
    }
}

/// What a rebuild prints: records, time, and both digests.
pub(super) fn print_rebuild(
    cli: &Cli,
    records: u64,
    secs: f64,
    digest: &str,
    previous: Option<&str>,
) -> Result<()> {
    let same = previous.map(|d| d == digest);
    if cli.json {
        outln!(
            "{}",
            serde_json::json!({"ok": true, "records": records, "seconds": secs,
                "digest": digest, "previous_digest": previous, "identical": same})
        );
    } else {
        outln!(
            "rebuilt views from {} records in {:.2}s ({:.0} records/s)",
            records,
            secs,
            records as f64 / secs.max(1e-9)
        );
        outln!("views digest  {digest}");
        match (previous, same) {
            (Some(d), Some(true)) => outln!("live digest   {d} (identical)"),
            (Some(d), _) => outln!(
                "live digest   {d} (DIFFERENT: the live views had drifted and were replaced)"
            ),
            (None, _) => outln!("live digest   (no readable live views to compare)"),
        }
    }
    Ok(())
}

/// A progress bar on stderr for long work (indicatif hides it when stderr
/// is not a terminal); hidden with --json.
pub fn progress_bar(cli: &Cli, total: u64, what: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template(&format!(
            "{what} {{bar:40}} {{pos}}/{{len}} records ({{per_sec}}, eta {{eta}})"
        ))
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    if cli.json {
        bar.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    bar
}
