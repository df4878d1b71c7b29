//! Host configuration and the harness routing table.
//!
//! A route names a harness the host can serve and says where its runtime
//! backend is. Static routes come from configuration (built-ins and
//! `--harness name=address`); registered routes are added at run time by
//! the HarnessRegistry service. The shells hold no routing state of their
//! own: every Runtime, Describe and Dial effect carries the route's
//! [`Backend`].

use super::ids::Nanos;
use super::lease::LeaseConfig;
use std::collections::{BTreeMap, BTreeSet};

use agentsessions_proto::v1::HarnessSpec;

/// Where a harness runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// A built-in harness served in process by the local runtime
    /// (filesystem-only: snapshots are journal handles).
    Local {
        /// Built-in harness kind (`echo`, `chat`, `counter`, …).
        kind: String,
    },
    /// A harness already running at an address (STATELESS_REPLAY only).
    Remote {
        /// `host:port`, `dns:///…` or `unix://path`.
        address: String,
    },
    /// A backend whose runtime captures memory (for example a VM snapshot
    /// service); the shell maps `kind` to it.
    Memory {
        /// Backend kind understood by the shell.
        kind: String,
    },
}

impl Backend {
    /// Whether the runtime can snapshot memory (the CanPlace rule).
    pub fn memory_snapshot(&self) -> bool {
        matches!(self, Self::Memory { .. })
    }

    /// Whether the turn's own connection must be re-described before the
    /// fence is minted (the address may serve a different harness than the
    /// one admission described).
    pub fn describes_live_harness(&self) -> bool {
        matches!(self, Self::Remote { .. })
    }
}

/// One servable harness.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// Where it runs.
    pub backend: Backend,
    /// When non-empty, Describe must report this id.
    pub descriptor_id: String,
    /// Static (configured) or registered.
    pub registered: bool,
    /// The registered spec, if any.
    pub spec: Option<HarnessSpec>,
}

/// Static configuration of one host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    /// Project for sessions created without one.
    pub default_project: String,
    /// Harness for sessions created without one.
    pub default_harness: String,
    /// Static routes by name.
    pub harnesses: BTreeMap<String, Route>,
    /// Names that are permanently reserved besides the static ones.
    pub reserved: Vec<String>,
    /// Bound on every Describe.
    pub describe_timeout_ms: u64,
    /// Bound from a dial until the harness's first event: a harness that
    /// never answers Start ends the turn as unavailable instead of holding
    /// the session until the client gives up.
    pub connect_timeout_ms: u64,
    /// Whether a tool executor is configured.
    pub has_executor: bool,
    /// Most operations (client calls) in flight at once; a call past it
    /// is refused with RESOURCE_EXHAUSTED before it touches the journal.
    pub max_in_flight: usize,
    /// Retention: sessions last written longer ago than this, with nothing
    /// in flight, are deleted by [`Request::Retain`](super::Request::Retain)
    /// steps. `None` (the default) keeps everything.
    pub retain_completed: Option<Nanos>,
    /// Session leases, for hosts sharing a journal (`None`: this host is
    /// the journal's only writer and takes none).
    pub lease: Option<LeaseConfig>,
    /// The model ids this host serves. A harness whose descriptor names
    /// another is refused before a turn starts (FAILED_PRECONDITION), so
    /// it fails at admission rather than mid-turn. `None`: every id is
    /// taken as served (worlds whose model answers anything).
    pub models: Option<BTreeSet<String>>,
    /// The tool policy and catalog every turn is gated by (see
    /// [`ToolGate`](super::tools::ToolGate)); the catalog changes at run
    /// time through `Host::set_catalog`.
    pub tools: super::tools::ToolGate,
    /// Tokens (input + output, as committed in USAGE records) a session
    /// may use; once reached, model calls are refused. A session's
    /// [`TOKEN_BUDGET_LABEL`] overrides it. `None`: no budget.
    pub session_token_budget: Option<i64>,
}

/// The session label that sets its own token budget (a positive integer),
/// overriding [`HostConfig::session_token_budget`].
pub const TOKEN_BUDGET_LABEL: &str = "token-budget";

impl HostConfig {
    /// The token budget of a session with `labels`: its label when that is
    /// a positive integer, else the host's.
    pub fn token_budget(&self, labels: &BTreeMap<String, String>) -> Option<i64> {
        let budget = labels
            .get(TOKEN_BUDGET_LABEL)
            .and_then(|v| v.parse::<i64>().ok())
            .filter(|&n| n > 0)
            .or(self.session_token_budget);
        // The daemon takes only a positive --session-token-budget.
        debug_assert!(budget.is_none_or(|n| n > 0), "a budget is positive");
        budget
    }
}

impl Default for HostConfig {
    fn default() -> Self {
        let mut harnesses = BTreeMap::new();
        harnesses.insert(
            "echo".to_owned(),
            Route {
                backend: Backend::Local {
                    kind: "echo".to_owned(),
                },
                descriptor_id: String::new(),
                registered: false,
                spec: None,
            },
        );
        let config = Self {
            default_project: "default".to_owned(),
            default_harness: "echo".to_owned(),
            harnesses,
            reserved: Vec::new(),
            describe_timeout_ms: 10_000,
            connect_timeout_ms: DEFAULT_CONNECT_TIMEOUT_MS,
            has_executor: true,
            max_in_flight: DEFAULT_MAX_IN_FLIGHT,
            retain_completed: None,
            lease: None,
            models: None,
            tools: super::tools::ToolGate::default(),
            session_token_budget: None,
        };
        debug_assert!(
            config.harnesses.contains_key(&config.default_harness),
            "the default harness has a route"
        );
        config
    }
}

/// Default [`HostConfig::max_in_flight`].
pub const DEFAULT_MAX_IN_FLIGHT: usize = 10_000;
/// Default [`HostConfig::connect_timeout_ms`].
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 10_000;
// A default host takes calls, and gives a harness time to answer.
const _: () = assert!(DEFAULT_MAX_IN_FLIGHT > 0 && DEFAULT_CONNECT_TIMEOUT_MS > 0);
/// Most children one Fork may create.
pub const MAX_FORK_CHILDREN: i32 = 128;
/// Default page size of ListSessions and ListHarnesses.
pub const DEFAULT_PAGE_SIZE: usize = 50;
/// Largest page size; larger requests are clamped.
pub const MAX_PAGE_SIZE: usize = 500;
// A page asks the store for 1..=MAX_PAGE_SIZE rows, the default included.
const _: () = assert!(0 < DEFAULT_PAGE_SIZE && DEFAULT_PAGE_SIZE <= MAX_PAGE_SIZE);
/// Session rows one retention step looks at.
pub const RETENTION_SCAN: usize = 256;
/// Deletions one retention step has in flight at once.
pub const RETENTION_PARALLEL: usize = 16;
// A retention step with nothing to scan, or no deletion slot, never ends.
const _: () = assert!(RETENTION_SCAN > 0 && RETENTION_PARALLEL > 0);
/// Records read per ReadLog effect when streaming a Replay.
pub const REPLAY_PAGE: i64 = 1024;
// A Replay page ends at `next + REPLAY_PAGE - 1`: it must hold a record.
const _: () = assert!(REPLAY_PAGE > 0);
/// Encoded bytes a Replay page stops at (one record past it at most), so
/// a reader holds about this much however large the journal's records.
pub const REPLAY_PAGE_BYTES: usize = 1 << 20;
