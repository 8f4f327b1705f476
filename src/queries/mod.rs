//! The read-only questions — trail, chain, agent, status, stats — answered
//! as the exact text or JSON lines the CLI prints. One function per
//! question over an open [`Engine`], so that `agentledger trail` on the
//! data dir and `GET /v1/runs/{run}/trail` through a running server say
//! the same thing, byte for byte.

macro_rules! line {
    ($out:expr, $($arg:tt)*) => {{
        let _ = writeln!($out, $($arg)*);
    }};
}

mod audit;
mod ledger;
pub mod report;
mod runs;

use crate::auth::Subject;
use crate::codes::Code;
use crate::engine::Engine;
use crate::error::LedgerError;
use crate::protocol::Failure;
use audit::export;
pub use audit::{verify, verify_said};
use ledger::{agent, stats, status, tokens};
use runs::{chain, picture, trace, trail};
pub use runs::{chain_picture, spans};
use serde::{Deserialize, Serialize};

/// A read-only question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "query", rename_all = "snake_case")]
pub enum Query {
    Trail {
        run: String,
        #[serde(default)]
        chain: bool,
        #[serde(default)]
        as_of: Option<String>,
    },
    Chain {
        run: String,
    },
    /// A run's spans, or its chain's, as OTLP/JSON (`trail --otlp`).
    Trace {
        run: String,
        #[serde(default)]
        chain: bool,
    },
    /// A run's chain drawn (`chain --format dot|svg`).
    Picture {
        run: String,
        format: PictureFormat,
    },
    Agent {
        name: String,
    },
    Status,
    Stats {
        task: String,
    },
    /// Every token issued: id, principal, scopes, times (never a token).
    Tokens,
    /// A run's or a chain's records with their covering checkpoints
    /// (checkpointing the tail first, so everything exported is attested).
    Export {
        #[serde(default)]
        run: Option<String>,
        #[serde(default)]
        chain: Option<String>,
        #[serde(default)]
        as_of: Option<u64>,
    },
}

/// How a chain is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PictureFormat {
    Dot,
    Svg,
}

impl PictureFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            PictureFormat::Dot => "dot",
            PictureFormat::Svg => "svg",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "dot" => Some(PictureFormat::Dot),
            "svg" => Some(PictureFormat::Svg),
            _ => None,
        }
    }

    /// The media type a server answers it with.
    pub fn content_type(self) -> &'static str {
        match self {
            PictureFormat::Dot => "text/vnd.graphviz; charset=utf-8",
            PictureFormat::Svg => "image/svg+xml",
        }
    }
}

/// What a question's answer prints: lines for stdout, or a refusal (exit
/// 1) or a bad question (exit 2) with its code and message.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Said {
    pub out: String,
    pub failure: Option<Failure>,
    /// Answered, but what it found is not clean (`verify` found a
    /// mismatch): exit 1.
    pub unclean: bool,
}

impl Said {
    fn refused(code: Code, message: impl Into<String>) -> Self {
        Said {
            out: String::new(),
            failure: Some(Failure::new(code, message)),
            unclean: false,
        }
    }

    pub fn answered(out: String) -> Self {
        Said {
            out,
            failure: None,
            unclean: false,
        }
    }

    /// The exit code the CLI ends with: 0 answered, 1 refused, 2 a
    /// question that cannot be asked.
    pub fn exit_code(&self) -> i32 {
        match &self.failure {
            None if self.unclean => 1,
            None => 0,
            Some(f) if f.error.code == Code::InvalidRequest => 2,
            Some(_) => 1,
        }
    }

    /// The line the CLI prints on stderr for a failure.
    pub fn error_line(&self) -> Option<String> {
        self.failure
            .as_ref()
            .map(|f| format!("agentledger: {}: {}", f.error.code, f.error.message))
    }
}

/// Answer `q`, as JSON lines when `json`, else as text (an export is JSON
/// lines either way).
pub fn answer(engine: &mut Engine, q: &Query, json: bool) -> Result<Said, LedgerError> {
    if let Some(refused) = not_a_name(q) {
        return Ok(refused);
    }
    let said = match q {
        Query::Export { run, chain, as_of } => {
            export(engine, run.as_deref(), chain.as_deref(), *as_of)
        }
        Query::Trail { run, chain, as_of } => trail(engine, run, *chain, as_of.as_deref(), json),
        Query::Chain { run } => chain(engine, run, json),
        Query::Picture { run, format } => picture(engine, run, *format),
        Query::Trace { run, chain } => trace(engine, run, *chain),
        Query::Agent { name } => agent(engine, name, json),
        Query::Status => status(engine, json),
        Query::Stats { task } => stats(engine, task, json),
        Query::Tokens => tokens(engine, json),
    };
    match said {
        Err(e) if e.is_refusal() => Ok(Said::refused(e.code(), e.to_string())),
        other => other,
    }
}

/// Whose chain `q` reads (in a cluster its owner answers it; see
/// `engine::placement`): a run's or a task's, or the ledger as a whole.
pub fn whose(q: &Query) -> crate::engine::Whose<'_> {
    use crate::engine::Whose;
    match q {
        Query::Trail { run, .. }
        | Query::Chain { run }
        | Query::Picture { run, .. }
        | Query::Trace { run, .. } => Whose::Run(run),
        Query::Stats { task } => Whose::Task(task),
        Query::Export { run: Some(run), .. } => Whose::Run(run),
        Query::Export {
            chain: Some(root), ..
        } => Whose::Run(root),
        Query::Export { .. } | Query::Agent { .. } | Query::Status | Query::Tokens => Whose::Anyone,
    }
}

/// What `q` is about, for the policy: the scopes of the agents whose run,
/// chain, agent or task it names (none when they do not exist), or the
/// ledger as a whole.
pub fn subject(engine: &Engine, q: &Query) -> Result<Subject, LedgerError> {
    let views = engine.views();
    let run = |run: &str| -> Result<Vec<String>, LedgerError> {
        Ok(views
            .run(run)?
            .map(|r| vec![r.scope.clone()])
            .unwrap_or_default())
    };
    // Every run of the chain the run is in: a chain may reach agents of
    // other scopes, and reading it shows their steps.
    let chain = |of: &str| -> Result<Vec<String>, LedgerError> {
        let Some(r) = views.run(of)? else {
            return Ok(Vec::new());
        };
        let mut scopes = vec![r.scope.clone()];
        let root = r.root.clone().unwrap_or_else(|| r.run.clone());
        for member in views.chain(&root)?.map(|c| c.runs).unwrap_or_default() {
            if let Some(m) = views.run(&member)? {
                scopes.push(m.scope.clone());
            }
        }
        scopes.sort();
        scopes.dedup();
        Ok(scopes)
    };
    Ok(Subject::Scopes(match q {
        Query::Status | Query::Tokens => return Ok(Subject::Whole),
        Query::Export {
            run: None,
            chain: None,
            ..
        } => return Ok(Subject::Whole),
        Query::Trail {
            run: r,
            chain: false,
            ..
        }
        | Query::Trace {
            run: r,
            chain: false,
        } => run(r)?,
        Query::Trail { run: r, .. }
        | Query::Trace { run: r, .. }
        | Query::Chain { run: r }
        | Query::Picture { run: r, .. } => chain(r)?,
        Query::Export {
            run: r, chain: c, ..
        } => {
            let mut scopes = Vec::new();
            if let Some(r) = r {
                scopes.extend(run(r)?);
            }
            if let Some(c) = c {
                scopes.extend(chain(c)?);
            }
            scopes
        }
        Query::Agent { name } => views
            .agent(name)?
            .map(|a| vec![a.scope])
            .unwrap_or_default(),
        Query::Stats { task } => match views.task(task)? {
            Some(t) => run(&t.master_run)?,
            None => Vec::new(),
        },
    }))
}

/// A question naming what cannot be a name (a run, agent or task): refused
/// `invalid_name` before anything is looked up, echoing at most 100
/// characters of it.
fn not_a_name(q: &Query) -> Option<Said> {
    let names: Vec<(&str, &str)> = match q {
        Query::Trail { run, .. }
        | Query::Chain { run }
        | Query::Picture { run, .. }
        | Query::Trace { run, .. } => vec![("run", run)],
        Query::Agent { name } => vec![("agent", name)],
        Query::Stats { task } => vec![("task", task)],
        Query::Export { run, chain, .. } => run
            .iter()
            .map(|r| ("run", r.as_str()))
            .chain(chain.iter().map(|c| ("chain root", c.as_str())))
            .collect(),
        Query::Status | Query::Tokens => Vec::new(),
    };
    let (what, name) = names
        .into_iter()
        .find(|(_, n)| !crate::model::ids::valid_name(n))?;
    Some(Said::refused(
        Code::InvalidName,
        format!(
            "{what} {:?} is not a name (1–128 of letters, digits, -_.:, never . or ..)",
            name.chars().take(100).collect::<String>()
        ),
    ))
}
