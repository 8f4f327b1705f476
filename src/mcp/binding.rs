//! Who asks about which run: what a transport finds before a tool is
//! listed or called.

/// Who asks about which run.
#[derive(Debug, Clone, Default)]
pub struct Binding {
    pub run: String,
    /// The run's agent: whose context the context tools get and return.
    pub agent: String,
    /// The names the run's trigger event exposes, in its order.
    pub names: Vec<String>,
    /// The caller, as retries and sessions tell callers apart.
    pub who: String,
    /// The MCP session the request belongs to, if any.
    pub session: Option<String>,
}
