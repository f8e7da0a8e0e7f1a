//! `agent.network` and `agent.docker`: the walls around the agent
//! (engine/agent/wall.rs, engine/agent/gate.rs). By default the agent is
//! walled: its own network namespace, the model reached through ward's
//! proxy, and nothing else unless `allow` names it; `network: open` runs it
//! on the host's network (ward says so in the chart).

use schemars::JsonSchema;
use serde::Deserialize;

/// `agent.network`: `open`, or `{ allow: [hosts] }`.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(untagged)]
pub enum Network {
    /// `open`: the agent runs on the host's network, unwalled (the model key
    /// still stays with ward).
    Open(OpenWord),
    /// Walled: the hosts the agent may reach through ward's egress proxy.
    Walled(NetworkAllow),
}

impl Default for Network {
    fn default() -> Self {
        Network::Walled(NetworkAllow::default())
    }
}

impl Network {
    pub fn is_open(&self) -> bool {
        matches!(self, Network::Open(_))
    }

    /// The hosts allowed (none when open: everything is).
    pub fn allow(&self) -> &[String] {
        match self {
            Network::Open(_) => &[],
            Network::Walled(w) => &w.allow,
        }
    }
}

/// The one word `open`.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum OpenWord {
    Open,
}

/// The hosts an agent may reach, besides the model (which it reaches
/// through ward's model proxy): `host` or `*.suffix` (its subdomains), for
/// HTTP CONNECT and plain HTTP through ward's egress proxy. Default: none.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct NetworkAllow {
    #[serde(default)]
    #[schemars(extend("items" = {"type": "string", "pattern": r"^(\*\.)?[A-Za-z0-9.-]+$"}))]
    pub allow: Vec<String>,
}

/// A host rule's problem, for the semantic pass.
pub fn check_rule(rule: &str) -> Option<String> {
    let name = rule.strip_prefix("*.").unwrap_or(rule);
    let ok = !name.is_empty()
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == ':');
    (!ok).then(|| format!("`{rule}` is not a host name or `*.suffix` (an address or a name, no scheme, no path)"))
}
