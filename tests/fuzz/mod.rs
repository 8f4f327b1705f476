//! Every decoder of outside bytes, fed arbitrary and mutated input: apply
//! lines, the record codec (envelope and body), embedded log frames,
//! checkpoint JSON, export files and WebSocket frames as they arrive. Each
//! must answer a clear error or a value, never panic. The suite runs a few thousand cases per decoder
//! (`tests/decoders.rs`); `cargo run --release --example fuzz_decoders`
//! runs a million each.
#![allow(dead_code)]

use agentledger::apply::parse_line;
use agentledger::audit::checkpoint::Checkpoint;
use agentledger::codec;
use agentledger::log::embedded::frame::scan_segment;
use agentledger::log::embedded::{EmbeddedConfig, EmbeddedLog};
use agentledger::log::Log;
use agentledger::model::Topic;
use agentledger::protocol::{parse_request, validate};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use serde_json::{json, Value};
use std::sync::OnceLock;

/// An error must say something.
fn clear(what: &str, message: String) -> Result<(), TestCaseError> {
    prop_assert!(!message.trim().is_empty(), "{what}: an empty error message");
    Ok(())
}

/// An `apply` line: parsed strictly, then into its operation.
pub fn apply_line(bytes: &[u8]) -> Result<(), TestCaseError> {
    match parse_line(bytes) {
        Err(failure) => {
            let answer = serde_json::to_value(&failure).unwrap();
            prop_assert_eq!(&answer["ok"], &json!(false));
            prop_assert!(answer["error"]["code"]
                .as_str()
                .is_some_and(|c| !c.is_empty()));
            clear("apply line", failure.error.message)
        }
        Ok(v) => match parse_request(&v).and_then(|r| validate(&r)) {
            Ok(_) => Ok(()),
            Err(e) => {
                prop_assert!(e.code().is_refusal(), "{e}: {}", e.code());
                clear("apply op", e.to_string())
            }
        },
    }
}

/// A ledger record, through every way the engine reads one.
pub fn codec_record(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Err(e) = codec::decode(bytes) {
        clear("decode", e.to_string())?;
    }
    if let Err(e) = codec::decode_envelope(bytes) {
        clear("decode_envelope", e.to_string())?;
    }
    match codec::check_digest(bytes) {
        Ok(len) => prop_assert!(len <= bytes.len()),
        Err(e) => clear("check_digest", e.to_string())?,
    }
    if let Err(e) = codec::decode_for_projection(bytes) {
        clear("decode_for_projection", e.to_string())?;
    }
    Ok(())
}

/// The bytes of an embedded log segment.
pub fn segment(bytes: &[u8]) -> Result<(), TestCaseError> {
    let scan = scan_segment(bytes);
    let len = bytes.len() as u64;
    prop_assert!(scan.frames.windows(2).all(|w| w[0] < w[1]));
    prop_assert!(scan.frames.iter().all(|&f| f < len));
    if let Some(bad) = scan.bad {
        prop_assert!(bad.at <= len);
        prop_assert!(scan.frames.iter().all(|&f| f < bad.at));
        clear("segment", bad.why)?;
    }
    Ok(())
}

/// A record of the checkpoints topic, as `verify` and the projector read it.
pub fn checkpoint_json(bytes: &[u8]) -> Result<(), TestCaseError> {
    match serde_json::from_slice::<Checkpoint>(bytes) {
        Ok(cp) => {
            if let Err(why) = cp.self_check() {
                clear("checkpoint self check", why.to_string())?;
            }
            let _ = cp.digest_at(cp.from);
            let _ = cp.topic();
            Ok(())
        }
        Err(e) => clear("checkpoint", e.to_string()),
    }
}

/// An export file, checked alone.
pub fn export_text(bytes: &[u8]) -> Result<(), TestCaseError> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Ok(()); // `verify --export` refuses it when reading the file
    };
    // Without a key, and with the one that signed the seed export, so the
    // notes and inclusion proofs are parsed too.
    for key in [None, Some(&seeds().verifier)] {
        match agentledger::audit::verify::verify_export(text, key) {
            Ok(report) => {
                for m in &report.mismatches {
                    clear("export mismatch", m.to_string())?;
                }
            }
            Err(e) => clear("export", e.to_string())?,
        }
    }
    Ok(())
}

/// Valid inputs of each kind, to mutate.
pub struct Seeds {
    pub records: Vec<Vec<u8>>,
    pub segment: Vec<u8>,
    pub checkpoint: Vec<u8>,
    pub export: Vec<u8>,
    /// The key that signed the checkpoints of `export`.
    pub verifier: agentledger::audit::note::VerifierKey,
    pub lines: Vec<Vec<u8>>,
}

/// Built once per process from a small real ledger.
pub fn seeds() -> &'static Seeds {
    static SEEDS: OnceLock<Seeds> = OnceLock::new();
    SEEDS.get_or_init(build_seeds)
}

fn build_seeds() -> Seeds {
    let dir = tempfile::tempdir().unwrap();
    let config = EmbeddedConfig {
        ledger_partitions: 1,
        ..EmbeddedConfig::default()
    };
    let lines: Vec<Value> = vec![
        json!({"op":"publish_agent","agent":"dev","scope":"acme/platform","listens":["review.done"],
            "emits":[{"event":"code.ready","context":"c","artifacts":["patch"]}]}),
        json!({"op":"publish_agent","agent":"rev","scope":"acme/platform","listens":["code.ready"],
            "emits":[{"event":"review.done","context":"c","artifacts":["review"]}]}),
        json!({"op":"open_run","run":"r1","agent":"dev"}),
        json!({"op":"close_run","run":"r1","status":"succeeded","summary":"s",
            "artifacts":{"patch":"p","final_answer":{"content_b64":"AAEC"}},"labels":["untrusted"]}),
        json!({"op":"dispatch"}),
        json!({"op":"open_run","run":"m1","agent":"dev"}),
        json!({"op":"open_task","task":"t1","run":"m1","task_context":{"TaskID":"T","UserQuery":"q",
            "TaskName":"n","TaskDescription":"d","GoalStatus":[],"OverallStatus":"open"}}),
        json!({"op":"put_blob","task":"t1","content":"doc","ttl_s":60}),
        json!({"op":"get_context","task":"t1","agent":"nobody"}),
    ];
    let signer = agentledger::audit::note::SignerKey::generate("fuzz").unwrap();
    let verifier = signer.verifier();
    {
        let opts = agentledger::engine::EngineOptions {
            embedded: config.clone(),
            signer: Some(std::sync::Arc::new(signer)),
            ..agentledger::engine::EngineOptions::default()
        };
        let mut engine = agentledger::engine::Engine::open_embedded(dir.path(), opts).unwrap();
        for l in &lines {
            let _ = agentledger::apply::apply_value(&mut engine, l);
        }
        engine.checkpoint(true).unwrap();
    }
    let log = EmbeddedLog::open(dir.path().join("log"), &config).unwrap();
    let records: Vec<Vec<u8>> = [Topic::Ledger, Topic::Registry]
        .into_iter()
        .flat_map(|t| log.read(t, 0, 0, 1000).unwrap())
        .map(|r| r.payload)
        .collect();
    let segment = std::fs::read(dir.path().join("log/ledger/0/00000000000000000000.seg")).unwrap();
    let checkpoint = log
        .read(Topic::Checkpoints, 0, 0, 1)
        .unwrap()
        .pop()
        .unwrap()
        .payload;
    let export = {
        let engine = agentledger::engine::Engine::open_embedded(
            dir.path(),
            agentledger::engine::EngineOptions {
                embedded: config,
                ..agentledger::engine::EngineOptions::default()
            },
        )
        .unwrap();
        let steps = agentledger::engine::trail::collect_trail(
            engine.views(),
            engine.log().as_ref(),
            "r1",
            true,
        )
        .unwrap();
        let cps: Vec<Checkpoint> = agentledger::audit::checkpoint::read_all(engine.log().as_ref())
            .unwrap()
            .into_iter()
            .filter_map(|(_, c)| c.ok())
            .collect();
        let mut out = Vec::new();
        agentledger::audit::export::write_export(
            engine.log().as_ref(),
            engine.views().tiles(),
            json!({"chain": "r1"}),
            &steps,
            &agentledger::audit::export::Attestations {
                checkpoints: &cps,
                witnessed: &Default::default(),
                signer: None,
            },
            &mut out,
        )
        .unwrap();
        out
    };
    Seeds {
        records,
        segment,
        checkpoint,
        export,
        verifier,
        lines: lines.iter().map(|l| l.to_string().into_bytes()).collect(),
    }
}

/// One edit of a byte string.
#[derive(Debug, Clone)]
enum Edit {
    Flip(usize, u8),
    Set(usize, u8),
    Insert(usize, Vec<u8>),
    Remove(usize, usize),
    Truncate(usize),
}

fn apply_edits(mut bytes: Vec<u8>, edits: &[Edit]) -> Vec<u8> {
    for e in edits {
        let n = bytes.len().max(1);
        match e {
            Edit::Flip(i, bit) => {
                if !bytes.is_empty() {
                    bytes[i % n] ^= 1 << (bit % 8);
                }
            }
            Edit::Set(i, v) => {
                if !bytes.is_empty() {
                    bytes[i % n] = *v;
                }
            }
            Edit::Insert(i, v) => {
                let at = i % (bytes.len() + 1);
                bytes.splice(at..at, v.iter().copied());
            }
            Edit::Remove(i, len) => {
                let at = i % n;
                let end = (at + len % 64).min(bytes.len());
                if at < end {
                    bytes.drain(at..end);
                }
            }
            Edit::Truncate(i) => bytes.truncate(i % n),
        }
    }
    bytes
}

fn edits() -> impl Strategy<Value = Vec<Edit>> {
    let edit = prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Edit::Flip(i, b)),
        3 => (any::<usize>(), prop_oneof![Just(0u8), Just(0xff), Just(250), Just(251), Just(252), Just(253), any::<u8>()])
            .prop_map(|(i, v)| Edit::Set(i, v)),
        1 => (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..16)).prop_map(|(i, v)| Edit::Insert(i, v)),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(i, l)| Edit::Remove(i, l)),
        1 => any::<usize>().prop_map(Edit::Truncate),
    ];
    proptest::collection::vec(edit, 1..6)
}

/// Arbitrary bytes, bytes that pass a first check (`prefix`), or a valid
/// input with a few edits.
fn inputs(valid: Vec<Vec<u8>>, prefix: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let n = valid.len();
    prop_oneof![
        2 => proptest::collection::vec(any::<u8>(), 0..512),
        2 => proptest::collection::vec(any::<u8>(), 0..512).prop_map(move |tail| {
            let mut v = prefix.clone();
            v.extend(tail);
            v
        }),
        6 => (0..n, edits()).prop_map(move |(i, e)| apply_edits(valid[i].clone(), &e)),
    ]
}

/// A value a JSON field may be given in place of the right one.
fn any_json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        Just(json!(u64::MAX)),
        Just(json!(-1)),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,40}".prop_map(Value::from),
        "[0-9a-f]{0,70}".prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
    ]
}

/// Valid JSON lines with one field of one line (nested fields too) given
/// another value: what a forger or a broken tool writes.
fn json_field_edits(valid: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let text = String::from_utf8(valid).unwrap_or_default();
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let n = lines.len().max(1);
    (0..n, any::<usize>(), any::<usize>(), any_json_leaf()).prop_map(
        move |(line, field, nested, value)| {
            let mut lines = lines.clone();
            if let Some(Value::Object(o)) = lines.get_mut(line) {
                let keys: Vec<String> = o.keys().cloned().collect();
                if let Some(k) = keys.get(field % keys.len().max(1)) {
                    match o.get_mut(k) {
                        Some(Value::Object(inner)) if nested % 2 == 0 && !inner.is_empty() => {
                            let ik: Vec<String> = inner.keys().cloned().collect();
                            inner.insert(ik[nested % ik.len()].clone(), value);
                        }
                        Some(slot) => *slot = value,
                        None => {}
                    }
                }
            }
            lines
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join("\n")
                .into_bytes()
        },
    )
}

/// JSON-shaped operations: known and unknown op names, with arbitrary and
/// mistyped fields.
fn op_lines() -> impl Strategy<Value = Vec<u8>> {
    let name = prop_oneof![
        Just("publish_agent"),
        Just("open_run"),
        Just("read_artifact"),
        Just("close_run"),
        Just("dispatch"),
        Just("open_task"),
        Just("update_task"),
        Just("put_blob"),
        Just("send_context"),
        Just("get_context"),
        Just("get_blob"),
        Just("return_context"),
        Just("evaluate"),
        Just("nope"),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::from),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map("[a-z_]{1,12}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    let field = prop_oneof![
        Just("run"),
        Just("agent"),
        Just("scope"),
        Just("listens"),
        Just("emits"),
        Just("status"),
        Just("artifacts"),
        Just("labels"),
        Just("task"),
        Just("content"),
        Just("content_b64"),
        Just("uri"),
        Just("mode"),
        Just("agent_context"),
        Just("task_context"),
        Just("subtask"),
        Just("decision"),
        Just("name"),
        Just("ttl_s"),
        Just("access"),
        Just("base64"),
        Just("x"),
    ];
    (name, proptest::collection::vec((field, value), 0..6)).prop_map(|(op, fields)| {
        let mut o = serde_json::Map::new();
        o.insert("op".into(), json!(op));
        for (k, v) in fields {
            o.insert(k.into(), v);
        }
        Value::Object(o).to_string().into_bytes()
    })
}

/// A client's frame as it goes on the wire (masked).
fn ws_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![(if fin { 0x80 } else { 0 }) | opcode];
    match payload.len() {
        n if n < 126 => f.push(0x80 | n as u8),
        n if n <= u16::MAX as usize => {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(0x80 | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    f.extend_from_slice(&[9, 8, 7, 6]);
    f.extend(
        payload
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ [9, 8, 7, 6][i % 4]),
    );
    f
}

/// WebSocket traffic as a client sends it: whole messages, fragments with
/// control frames between them, a message cut short, bad UTF-8.
fn ws_traffic() -> Vec<Vec<u8>> {
    let op = br#"{"op":"dispatch"}"#;
    let mut fragmented = ws_frame(false, 1, &op[..5]);
    fragmented.extend(ws_frame(true, 9, b"ping"));
    fragmented.extend(ws_frame(false, 0, &op[5..9]));
    fragmented.extend(ws_frame(true, 0, &op[9..]));
    let mut two = ws_frame(true, 1, op);
    two.extend(ws_frame(true, 2, &[0xff; 300]));
    let mut cut = ws_frame(false, 1, &[b' '; 200]);
    cut.extend(ws_frame(false, 0, &[0xc3]));
    vec![
        ws_frame(true, 1, op),
        fragmented,
        two,
        cut,
        ws_frame(true, 1, &[0xc3, 0x28]),
        ws_frame(true, 8, &[3, 232]),
        ws_frame(false, 2, &[1; 70_000])[..2_000].to_vec(),
    ]
}

/// WebSocket bytes followed frame by frame: whatever the bytes and however
/// the reads cut them, the same state, and never more held than was sent.
pub fn ws_frames(bytes: &[u8]) -> Result<(), TestCaseError> {
    use agentledger::server::ws_frames::Assembly;
    let mut whole = Assembly::default();
    whole.feed(bytes);
    let step = bytes.first().map_or(1, |b| (*b as usize % 13) + 1);
    let mut cut = Assembly::default();
    for chunk in bytes.chunks(step) {
        cut.feed(chunk);
        prop_assert!(cut.held() <= bytes.len() as u64);
    }
    prop_assert_eq!(
        (whole.open(), whole.held(), whole.begun()),
        (cut.open(), cut.held(), cut.begun())
    );
    prop_assert!(whole.held() <= bytes.len() as u64);
    prop_assert!(whole.begun() <= bytes.len() as u64 / 2);
    Ok(())
}

/// Run `check` over `cases` inputs from `strategy`; panics naming the
/// (shrunk) input that failed.
fn run(
    name: &str,
    cases: u32,
    strategy: impl Strategy<Value = Vec<u8>>,
    check: fn(&[u8]) -> Result<(), TestCaseError>,
) {
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    match runner.run(&strategy, |input| check(&input)) {
        Ok(()) => {}
        Err(TestError::Fail(why, input)) => {
            panic!(
                "{name}: {why} for input {:?}",
                String::from_utf8_lossy(&input)
            )
        }
        Err(e) => panic!("{name}: {e}"),
    }
}

/// A decoder's name and its run over a number of cases.
pub type Decoder = (&'static str, Box<dyn Fn()>);

/// The decoders, by name, each with its inputs and check.
pub fn all(cases: u32) -> Vec<Decoder> {
    let s = seeds();
    vec![
        (
            "apply line",
            Box::new(move || {
                run(
                    "apply line (bytes)",
                    cases / 2,
                    inputs(s.lines.clone(), b"{\"op\":".to_vec()),
                    apply_line,
                );
                run(
                    "apply line (ops)",
                    cases - cases / 2,
                    op_lines(),
                    apply_line,
                );
            }),
        ),
        (
            "codec record",
            Box::new(move || {
                let version = codec::SCHEMA_VERSION.to_le_bytes().to_vec();
                run(
                    "codec record",
                    cases,
                    inputs(s.records.clone(), version),
                    codec_record,
                )
            }),
        ),
        (
            "log frames",
            Box::new(move || {
                let header = s.segment[..12].to_vec();
                run(
                    "log frames",
                    cases,
                    inputs(vec![s.segment.clone()], header),
                    segment,
                )
            }),
        ),
        (
            "checkpoint json",
            Box::new(move || {
                let bytes = inputs(vec![s.checkpoint.clone()], b"{\"schema\":".to_vec());
                let fields = json_field_edits(s.checkpoint.clone());
                run(
                    "checkpoint json",
                    cases,
                    prop_oneof![bytes, fields],
                    checkpoint_json,
                )
            }),
        ),
        (
            "ws frames",
            Box::new(move || {
                run(
                    "ws frames",
                    cases,
                    inputs(ws_traffic(), vec![0x01, 0xfe]),
                    ws_frames,
                )
            }),
        ),
        (
            "export file",
            Box::new(move || {
                let bytes = inputs(vec![s.export.clone()], b"{\"type\":\"record\",".to_vec());
                let fields = json_field_edits(s.export.clone());
                run(
                    "export file",
                    cases,
                    prop_oneof![bytes, fields],
                    export_text,
                )
            }),
        ),
    ]
}
