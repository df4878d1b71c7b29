//! The route policy: which harness names a host serves of its own, which
//! are reserved for good, and how `--harness name=address` routes combine
//! with them. A decision, so it lives here and not in the daemon's start;
//! the shell only parses the addresses and reports the refusal.
//!
//! Invariant: every built-in name is either served locally or reserved, so
//! no registration can ever take it under a different contract.

use std::collections::BTreeMap;

use super::config::{Backend, Route};

/// Built-in harnesses every host serves in process.
pub const BUILTINS: [&str; 3] = ["echo", "approval", "counter"];
/// Built-in harnesses served only where a model is configured, and
/// reserved everywhere.
pub const MODEL_BUILTINS: [&str; 2] = ["chat", "agent"];

/// Why a static route table cannot be built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteRefusal {
    /// `--harness` names a built-in harness.
    BuiltIn(String),
    /// `--harness` names one harness twice.
    Duplicate(String),
}

impl std::fmt::Display for RouteRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RouteRefusal::BuiltIn(name) => {
                write!(f, "--harness {name}: the name is a built-in harness")
            }
            RouteRefusal::Duplicate(name) => write!(f, "--harness {name}: duplicate name"),
        }
    }
}

/// The static routes of a host and the names it reserves besides them:
/// the built-ins (the counter on the memory-snapshot runtime, since it
/// keeps its state in RAM), `chat` and `agent` when `models_served`, and one
/// remote route per `(name, address)`, in the order given.
pub fn static_routes(
    models_served: bool,
    remotes: &[(String, String)],
) -> Result<(BTreeMap<String, Route>, Vec<String>), RouteRefusal> {
    let local = |kind: &str| Route {
        backend: Backend::Local { kind: kind.into() },
        descriptor_id: String::new(),
        registered: false,
        spec: None,
    };
    let mut routes = BTreeMap::new();
    for kind in BUILTINS {
        routes.insert(kind.to_owned(), local(kind));
    }
    routes.insert(
        "counter".to_owned(),
        Route {
            backend: Backend::Memory {
                kind: "counter".into(),
            },
            ..local("counter")
        },
    );
    if models_served {
        for kind in MODEL_BUILTINS {
            routes.insert(kind.to_owned(), local(kind));
        }
    }
    for (name, address) in remotes {
        if BUILTINS.contains(&name.as_str()) || MODEL_BUILTINS.contains(&name.as_str()) {
            return Err(RouteRefusal::BuiltIn(name.clone()));
        }
        if routes.contains_key(name) {
            return Err(RouteRefusal::Duplicate(name.clone()));
        }
        assert!(!address.is_empty(), "the shell parsed the address first");
        routes.insert(
            name.clone(),
            Route {
                backend: Backend::Remote {
                    address: address.clone(),
                },
                ..local(name)
            },
        );
    }
    // Built-in names stay reserved even when not served here, so no other
    // host can register them under a different contract.
    let reserved: Vec<String> = MODEL_BUILTINS.iter().map(|n| (*n).to_owned()).collect();
    debug_assert!(
        BUILTINS
            .iter()
            .chain(&MODEL_BUILTINS)
            .all(|n| routes.contains_key(*n) || reserved.iter().any(|r| r == n))
    );
    assert_eq!(
        routes.len(),
        BUILTINS.len() + remotes.len() + if models_served { 2 } else { 0 }
    );
    Ok((routes, reserved))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote(name: &str) -> (String, String) {
        (name.to_owned(), "127.0.0.1:1".to_owned())
    }

    #[test]
    fn builtins_are_served_or_reserved_and_remotes_follow() {
        let (routes, reserved) = static_routes(false, &[remote("ext")]).unwrap();
        assert_eq!(
            routes.keys().collect::<Vec<_>>(),
            ["approval", "counter", "echo", "ext"]
        );
        assert!(routes["counter"].backend.memory_snapshot());
        assert_eq!(reserved, ["chat", "agent"]);
        let (routes, _) = static_routes(true, &[]).unwrap();
        assert!(routes.contains_key("chat") && routes.contains_key("agent"));
    }

    #[test]
    fn a_remote_route_may_not_take_a_builtin_or_repeat_a_name() {
        for name in ["echo", "chat", "agent", "counter"] {
            assert_eq!(
                static_routes(false, &[remote(name)]),
                Err(RouteRefusal::BuiltIn(name.into()))
            );
        }
        assert_eq!(
            static_routes(false, &[remote("x"), remote("x")]),
            Err(RouteRefusal::Duplicate("x".into()))
        );
    }
}
