//! The chain rules (R1–R9) as pure functions over view state. No IO here:
//! the engine fetches the state a rule needs, calls it, and records what it
//! decided. Each rule has tests named after it in its module.

pub mod artifacts;
pub mod chain;
pub mod decide;
pub mod dispatch;
pub mod labels;
