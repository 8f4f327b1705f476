//! TEMPORARY placeholder until the loop-search module lands.
use serde::{Deserialize, Serialize};
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentNode {
    pub name: String,
    pub scope: String,
    pub listens: Vec<String>,
    pub emits: Vec<String>,
}
#[derive(Debug, Clone, Default)]
pub struct AgentIndex {
    nodes: std::collections::BTreeMap<String, AgentNode>,
}
impl AgentIndex {
    pub fn upsert(&mut self, n: AgentNode) {
        self.nodes.insert(n.name.clone(), n);
    }
}
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopBounds {
    pub max_loops: usize,
    pub max_work: u64,
}
impl Default for LoopBounds {
    fn default() -> Self {
        Self {
            max_loops: 10,
            max_work: 100_000,
        }
    }
}
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopWarning {
    pub loop_agents: Vec<String>,
    pub text: String,
    pub note: Option<String>,
}
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopReport {
    pub warnings: Vec<LoopWarning>,
    pub may_be_more: bool,
    pub checked_in_full: bool,
    pub text: Option<String>,
}
pub fn check_publish(
    _i: &AgentIndex,
    _c: &AgentNode,
    _a: &[String],
    _b: &LoopBounds,
) -> LoopReport {
    LoopReport {
        warnings: vec![],
        may_be_more: false,
        checked_in_full: true,
        text: None,
    }
}
