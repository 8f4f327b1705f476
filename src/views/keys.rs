//! Key layout of the single views tree. One byte of prefix says what a key
//! holds; ids are followed by a 0 byte where something comes after them, and
//! numbers are big-endian so that keys sort in numeric order.

use crate::model::Topic;

pub const OFFSET: u8 = b'o';
pub const AGENT: u8 = b'a';
pub const VERSION: u8 = b'v';
pub const LISTENER: u8 = b'l';
pub const RUN: u8 = b'r';
pub const TRAIL: u8 = b't';
pub const CHAIN: u8 = b'c';
pub const FINISHED: u8 = b'f';
pub const CURSOR: u8 = b'd';
pub const TASK: u8 = b'k';
pub const CHECKPOINTED: u8 = b'x';
pub const CONTENT_REF: u8 = b'b';
pub const TOKEN: u8 = b'n';
pub const TOKEN_ID: u8 = b'i';
pub const CHECKPOINT_NOTE: u8 = b'y';
pub const WITNESSED_NOTE: u8 = b'z';
pub const SEALED_TASK: u8 = b's';
pub const ERASED_TASK: u8 = b'e';
pub const FORMAT: u8 = b'_';

pub const ALL_PREFIXES: [(u8, &str); 18] = [
    (OFFSET, "offsets"),
    (AGENT, "agents"),
    (VERSION, "versions"),
    (LISTENER, "listeners"),
    (RUN, "runs"),
    (TRAIL, "trail_pages"),
    (CHAIN, "chains"),
    (FINISHED, "finished_queue"),
    (CURSOR, "dispatch_cursors"),
    (TASK, "tasks"),
    (CHECKPOINTED, "checkpoint_marks"),
    (CHECKPOINT_NOTE, "checkpoint_notes"),
    (WITNESSED_NOTE, "witnessed_notes"),
    (SEALED_TASK, "sealed_tasks"),
    (ERASED_TASK, "erased_tasks"),
    (CONTENT_REF, "content_refs"),
    (TOKEN, "tokens"),
    (TOKEN_ID, "token_ids"),
];

fn with(prefix: u8, parts: &[&[u8]]) -> Vec<u8> {
    let mut k = Vec::with_capacity(1 + parts.iter().map(|p| p.len()).sum::<usize>());
    k.push(prefix);
    for p in parts {
        k.extend_from_slice(p);
    }
    k
}

pub fn offset(topic: Topic, partition: u32) -> Vec<u8> {
    with(OFFSET, &[&[topic.index()], &partition.to_be_bytes()])
}
pub fn agent(agent: &str) -> Vec<u8> {
    with(AGENT, &[agent.as_bytes()])
}
pub fn version_prefix(agent: &str) -> Vec<u8> {
    with(VERSION, &[agent.as_bytes(), &[0]])
}
pub fn version(agent: &str, version: u32) -> Vec<u8> {
    with(VERSION, &[agent.as_bytes(), &[0], &version.to_be_bytes()])
}
pub fn listener_prefix(event: &str) -> Vec<u8> {
    with(LISTENER, &[event.as_bytes(), &[0]])
}
pub fn listener(event: &str, agent: &str) -> Vec<u8> {
    with(LISTENER, &[event.as_bytes(), &[0], agent.as_bytes()])
}
/// A token's state, by the SHA-256 of the token.
pub fn token(sha256: &[u8; 32]) -> Vec<u8> {
    with(TOKEN, &[sha256])
}
/// A token's SHA-256, by its id.
pub fn token_id(id: &str) -> Vec<u8> {
    with(TOKEN_ID, &[id.as_bytes()])
}
/// The one key saying which `VIEWS_FORMAT` the views are in.
pub fn format() -> Vec<u8> {
    vec![FORMAT]
}
pub fn run(run: &str) -> Vec<u8> {
    with(RUN, &[run.as_bytes()])
}
pub fn trail_prefix(run: &str) -> Vec<u8> {
    with(TRAIL, &[run.as_bytes(), &[0]])
}
/// Trail pointers are kept in pages of this many steps: one view write per
/// run and batch instead of one per step, and no page grows without bound.
pub const TRAIL_PAGE: u32 = 64;

pub fn trail_page(run: &str, step: u32) -> Vec<u8> {
    with(
        TRAIL,
        &[run.as_bytes(), &[0], &(step / TRAIL_PAGE).to_be_bytes()],
    )
}
pub fn chain(root: &str) -> Vec<u8> {
    with(CHAIN, &[root.as_bytes()])
}
pub fn finished(partition: u32, offset: u64) -> Vec<u8> {
    with(FINISHED, &[&partition.to_be_bytes(), &offset.to_be_bytes()])
}
pub fn finished_offset(key: &[u8]) -> u64 {
    key.get(5..13)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0)
}
pub fn checkpointed(topic: Topic, partition: u32) -> Vec<u8> {
    with(CHECKPOINTED, &[&[topic.index()], &partition.to_be_bytes()])
}
/// The signed note of a partition's furthest checkpoint.
pub fn checkpoint_note(topic: Topic, partition: u32) -> Vec<u8> {
    with(
        CHECKPOINT_NOTE,
        &[&[topic.index()], &partition.to_be_bytes()],
    )
}
/// The largest checkpoint of a partition that witnesses cosigned: its size
/// and note with every cosignature line received.
pub fn witnessed_note(topic: Topic, partition: u32) -> Vec<u8> {
    with(
        WITNESSED_NOTE,
        &[&[topic.index()], &partition.to_be_bytes()],
    )
}
/// A task's state sealed with its key (see `crate::erasure`).
pub fn sealed_task(task: &str) -> Vec<u8> {
    with(SEALED_TASK, &[task.as_bytes()])
}
/// When a task's context was erased.
pub fn erased_task(task: &str) -> Vec<u8> {
    with(ERASED_TASK, &[task.as_bytes()])
}
pub fn task(task: &str) -> Vec<u8> {
    with(TASK, &[task.as_bytes()])
}
/// The latest deadline among the ledger's references to some content.
pub fn content_ref(sha256: &[u8; 32]) -> Vec<u8> {
    with(CONTENT_REF, &[sha256])
}
pub fn dispatch_cursor(partition: u32) -> Vec<u8> {
    with(CURSOR, &[&partition.to_be_bytes()])
}
