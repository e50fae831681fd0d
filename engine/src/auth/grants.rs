//! What a principal may do: the six actions of streamcast's vocabulary, each on exact stream
//! names or on every stream (`"*"`).
//!
//! Pure: parsed once from the config (or a JWT's grants claim) and asked per request, never per
//! frame.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::config::valid_stream_name;

/// One action a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// Subscribe (WebSocket, SSE), replay, pull rows, see the stream in the catalog.
    DataRead,
    /// Publish (WebSocket) and bulk ingest.
    DataPublish,
    /// See the stream in `/stats` and `/metrics`.
    StatsRead,
    /// Read the control plane.
    ControlRead,
    /// Change the control plane; revoke principals (on `"*"`).
    ControlMutate,
    /// Migrate a stream's schema.
    ControlMigrate,
}

impl Action {
    /// Every action, in the order they are documented.
    pub const ALL: [Action; 6] = [
        Action::DataRead,
        Action::DataPublish,
        Action::StatsRead,
        Action::ControlRead,
        Action::ControlMutate,
        Action::ControlMigrate,
    ];

    /// The action's name as written in the config and in JWT claims, e.g. `data.read`.
    pub fn name(self) -> &'static str {
        match self {
            Action::DataRead => "data.read",
            Action::DataPublish => "data.publish",
            Action::StatsRead => "stats.read",
            Action::ControlRead => "control.read",
            Action::ControlMutate => "control.mutate",
            Action::ControlMigrate => "control.migrate",
        }
    }

    /// The action named `s`.
    pub fn parse(s: &str) -> Option<Action> {
        Action::ALL.into_iter().find(|a| a.name() == s)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The streams one action is granted on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Scope {
    /// None.
    #[default]
    Nothing,
    /// `"*"`: every stream, including streams created later.
    Every,
    /// Exactly these names.
    Streams(BTreeSet<String>),
}

impl Scope {
    fn covers(&self, stream: &str) -> bool {
        match self {
            Scope::Nothing => false,
            Scope::Every => true,
            Scope::Streams(s) => s.contains(stream),
        }
    }
}

/// A principal's grants: per action, the streams it covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    scopes: [Scope; 6],
}

impl Grants {
    /// Whether `action` is granted on `stream`.
    pub fn allows(&self, action: Action, stream: &str) -> bool {
        self.scopes[action as usize].covers(stream)
    }

    /// Whether `action` is granted on at least one stream (or on `"*"`): the endpoints that list
    /// streams (`/stats`, `/metrics`) answer 403 without it, and filter with [`Grants::allows`].
    pub fn allows_any(&self, action: Action) -> bool {
        match &self.scopes[action as usize] {
            Scope::Nothing => false,
            Scope::Every => true,
            Scope::Streams(s) => !s.is_empty(),
        }
    }

    /// Whether `action` is granted on `"*"` (the process-wide operations: revoking a principal).
    pub fn allows_every(&self, action: Action) -> bool {
        self.scopes[action as usize] == Scope::Every
    }

    /// Whether nothing at all is granted.
    pub fn is_empty(&self) -> bool {
        Action::ALL.iter().all(|&a| !self.allows_any(a))
    }

    fn add(&mut self, action: Action, stream: &str) {
        let scope = &mut self.scopes[action as usize];
        if stream == "*" {
            *scope = Scope::Every;
            return;
        }
        match scope {
            Scope::Every => {}
            Scope::Nothing => *scope = Scope::Streams(BTreeSet::from([stream.to_string()])),
            Scope::Streams(s) => {
                s.insert(stream.to_string());
            }
        }
    }

    /// Parses grants written as a map from action to stream names, the form of both the config
    /// (`grants = { "data.read" = ["trades"], "stats.read" = ["*"] }`) and a JWT's grants claim
    /// (`{"data.read":["trades"]}`). Every refusal names the action or the stream that is wrong.
    pub fn from_map(map: &BTreeMap<String, Vec<String>>) -> Result<Grants, String> {
        let mut g = Grants::default();
        for (action, streams) in map {
            let Some(a) = Action::parse(action) else {
                let known: Vec<&str> = Action::ALL.iter().map(|a| a.name()).collect();
                return Err(format!(
                    "unknown action {action:?} (the actions are {})",
                    known.join(", ")
                ));
            };
            for s in streams {
                if s != "*" && !valid_stream_name(s) {
                    return Err(format!(
                        "{action}: {s:?} is neither \"*\" nor a stream name ([A-Za-z0-9][A-Za-z0-9_.-]{{0,127}})"
                    ));
                }
                g.add(a, s);
            }
        }
        Ok(g)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        pairs
            .iter()
            .map(|(a, s)| (a.to_string(), s.iter().map(|x| x.to_string()).collect()))
            .collect()
    }

    #[test]
    fn exact_names_and_star() {
        let g = Grants::from_map(&map(&[
            ("data.read", &["trades", "quotes"]),
            ("stats.read", &["*"]),
        ]))
        .unwrap();
        assert!(g.allows(Action::DataRead, "trades"));
        assert!(!g.allows(Action::DataRead, "trades2"));
        assert!(!g.allows(Action::DataPublish, "trades"));
        assert!(g.allows(Action::StatsRead, "anything"));
        assert!(g.allows_any(Action::DataRead));
        assert!(!g.allows_any(Action::ControlMutate));
        assert!(g.allows_every(Action::StatsRead));
        assert!(!g.allows_every(Action::DataRead));
        assert!(!g.is_empty());
        assert!(Grants::default().is_empty());
    }

    #[test]
    fn star_absorbs_names() {
        let g = Grants::from_map(&map(&[("data.read", &["a", "*", "b"])])).unwrap();
        assert!(g.allows_every(Action::DataRead));
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let e = Grants::from_map(&map(&[("data.write", &["a"])])).unwrap_err();
        assert!(e.contains("unknown action \"data.write\""), "{e}");
        assert!(e.contains("data.publish"), "{e}");
        let e = Grants::from_map(&map(&[("data.read", &["bad name"])])).unwrap_err();
        assert!(e.contains("\"bad name\""), "{e}");
    }
}
