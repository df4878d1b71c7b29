//! The host's tool policy: which calls run at once, which wait for a
//! human, which never run. Decided here, from the operator's rules and the
//! catalog the shell reports, never from what a harness asks for.
//!
//! Invariant: the policy is a floor. A harness may ask for more care than
//! the policy (approval where it says auto), never for less: a call the
//! policy gates is gated whatever mediation it carries, and a denied or
//! unknown tool never reaches an executor.

use std::collections::BTreeMap;
use std::sync::Arc;

/// What the host does with a call to a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Policy {
    /// Run it as soon as its intent is durable (CONTROLLER_MEDIATED).
    Auto,
    /// Park it until a human decides (REQUIRES_APPROVAL).
    Approval,
    /// Never run it: a durable error receipt, and it is not offered.
    Deny,
}

impl Policy {
    /// The name used in flags and on pages.
    pub fn name(self) -> &'static str {
        let name = match self {
            Self::Auto => "auto",
            Self::Approval => "approval",
            Self::Deny => "deny",
        };
        debug_assert!(!name.contains('='), "the policy follows a rule's last '='");
        name
    }
}

/// One `--tool-policy PATTERN=POLICY`: `*` matches any run of characters.
/// `approval:DURATION` also bounds how long a request may wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRule {
    /// The tool names it covers (`fs__*`, `*__write_file`, `git__git_commit`).
    pub pattern: String,
    /// What it decides.
    pub policy: Policy,
    /// For `approval:DURATION`: how long a request may stay undecided
    /// before the host denies it, in milliseconds.
    pub expiry_ms: Option<u64>,
}

/// Why a rule was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// Not `PATTERN=POLICY`.
    #[error("tool policy {0:?}: want PATTERN=auto|approval|deny")]
    Shape(String),
    /// An unknown policy word.
    #[error("tool policy {0:?}: the policy is auto, approval or deny")]
    Policy(String),
    /// `approval:` with no duration it can read, or one below a second.
    #[error("tool policy {0:?}: want approval:DURATION (like 90s, 30m, 1h30m), at least 1s")]
    Expiry(String),
}

/// Reads an expiry (`90s`, `30m`, `1h30m`) in milliseconds; below a
/// second is refused, since a deadline that short denies before anyone
/// could read the request.
pub fn parse_expiry(text: &str) -> Option<u64> {
    let d = humantime::parse_duration(text).ok()?;
    let ms = u64::try_from(d.as_millis()).ok()?;
    debug_assert!(ms < 1000 || d.as_secs() >= 1);
    (ms >= 1000).then_some(ms)
}

/// How an expiry reads in a reason: `30m`, `1h 30m`, `90ms`.
pub fn expiry_text(ms: u64) -> String {
    assert!(ms > 0, "an expiry is positive");
    let text = humantime::format_duration(std::time::Duration::from_millis(ms)).to_string();
    debug_assert!(!text.is_empty());
    text
}

impl std::str::FromStr for ToolRule {
    type Err = RuleError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (pattern, word) = s
            .rsplit_once('=')
            .filter(|(p, _)| !p.is_empty())
            .ok_or_else(|| RuleError::Shape(s.to_owned()))?;
        let (word, expiry) = match word.split_once(':') {
            Some(("approval", d)) => match parse_expiry(d) {
                Some(ms) => ("approval", Some(ms)),
                None => return Err(RuleError::Expiry(s.to_owned())),
            },
            _ => (word, None),
        };
        let policy = match word {
            "auto" => Policy::Auto,
            "approval" => Policy::Approval,
            "deny" => Policy::Deny,
            _ => return Err(RuleError::Policy(s.to_owned())),
        };
        debug_assert_eq!(policy.name(), word, "parsing and Policy::name agree");
        debug_assert!(expiry.is_none() || policy == Policy::Approval);
        Ok(Self {
            pattern: pattern.to_owned(),
            policy,
            expiry_ms: expiry,
        })
    }
}

impl ToolRule {
    /// True when the pattern covers `name`.
    pub fn covers(&self, name: &str) -> bool {
        glob(&self.pattern, name)
    }

    /// How specific the pattern is: literal characters count, so
    /// `fs__write_file` beats `fs__*`, which beats `*`.
    fn specificity(&self) -> usize {
        self.pattern.chars().filter(|&c| c != '*').count()
    }
}

/// `*` matches any run (possibly empty); everything else matches itself.
fn glob(pattern: &str, text: &str) -> bool {
    let matched = match pattern.split_once('*') {
        None => pattern == text,
        Some((head, tail)) => {
            let Some(rest) = text.strip_prefix(head) else {
                return false;
            };
            (0..=rest.len()).any(|n| rest.is_char_boundary(n) && glob(tail, &rest[n..]))
        }
    };
    debug_assert!(
        !matched || pattern.bytes().filter(|&b| b != b'*').count() <= text.len(),
        "a match holds every literal byte of the pattern"
    );
    matched
}

/// One tool the host can run, as its server describes it. The hints are
/// untrusted: they only choose a default under the operator's rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogTool {
    /// The name harnesses call it by (`SERVER__TOOL`, or a built-in name).
    pub name: String,
    /// The MCP server serving it; "" for a tool built into the host.
    pub server: String,
    /// `readOnlyHint`.
    pub read_only: bool,
    /// `idempotentHint`.
    pub idempotent: bool,
    /// `destructiveHint`.
    pub destructive: bool,
    /// `openWorldHint`.
    pub open_world: bool,
    /// What the server says it does.
    pub description: String,
    /// Its server is connected now.
    pub up: bool,
}

/// Every tool the host can run, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Catalog {
    tools: BTreeMap<String, CatalogTool>,
}

impl Catalog {
    /// A catalog of `tools` (a later duplicate name replaces an earlier).
    pub fn new(tools: impl IntoIterator<Item = CatalogTool>) -> Self {
        let catalog = Self {
            tools: tools.into_iter().map(|t| (t.name.clone(), t)).collect(),
        };
        debug_assert!(
            catalog.tools.iter().all(|(k, t)| *k == t.name),
            "each tool is filed under its name"
        );
        catalog
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&CatalogTool> {
        let tool = self.tools.get(name);
        debug_assert!(tool.is_none_or(|t| t.name == name));
        tool
    }

    /// Every tool, by name.
    pub fn iter(&self) -> impl Iterator<Item = &CatalogTool> {
        self.tools.values()
    }
}

impl ToolGate {
    /// The catalog as listed to clients: each tool with the policy its
    /// calls meet (`harness` where the call's mediation decides).
    pub fn listing(&self) -> agentsessions_proto::v1::ListToolsResponse {
        let tools = self.catalog.iter().flat_map(|c| c.iter()).map(|t| {
            let policy = match self.verdict(&t.name) {
                Verdict::Policy(p) => p.name(),
                Verdict::Harness | Verdict::Unknown => "harness",
            };
            agentsessions_proto::v1::CatalogEntry {
                name: t.name.clone(),
                server: t.server.clone(),
                description: t.description.clone(),
                policy: policy.to_owned(),
                read_only: t.read_only,
                destructive: t.destructive,
                idempotent: t.idempotent,
                open_world: t.open_world,
                up: t.up,
            }
        });
        let listing = agentsessions_proto::v1::ListToolsResponse {
            tools: tools.collect(),
        };
        debug_assert!(
            listing.tools.windows(2).all(|w| w[0].name < w[1].name),
            "the catalog lists each tool once, by name"
        );
        listing
    }
}

/// A listed tool's hints by name, in a fixed order. MCP's destructive hint
/// means something only for a tool that is not read-only.
pub fn hints(t: &agentsessions_proto::v1::CatalogEntry) -> Vec<&'static str> {
    let hints: Vec<&'static str> = [
        (t.read_only, "read-only"),
        (t.destructive && !t.read_only, "destructive"),
        (t.idempotent, "idempotent"),
        (t.open_world, "open-world"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    debug_assert!(
        !(hints.contains(&"read-only") && hints.contains(&"destructive")),
        "a read-only tool is never shown as destructive"
    );
    hints
}

/// What the policy says about one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The policy decides.
    Policy(Policy),
    /// No rule and no MCP default: the harness's mediation stands (a
    /// built-in tool, or a host without a catalog).
    Harness,
    /// The catalog has no such tool.
    Unknown,
}

/// The rules and the catalog a turn is gated by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolGate {
    /// The operator's rules, in flag order.
    pub rules: Vec<ToolRule>,
    /// The tools the host can run; `None`: the host keeps no catalog and
    /// every name goes to its executor as the harness asked.
    pub catalog: Option<Arc<Catalog>>,
    /// `--approval-timeout`: how long any approval request may stay
    /// undecided, in milliseconds; `None`: forever, unless a rule says.
    pub approval_expiry_ms: Option<u64>,
}

impl ToolGate {
    /// The verdict on a call to `name`: the most specific covering rule
    /// (on a tie the later rule wins); else, for an MCP tool, `auto` when
    /// it says it is read-only and `approval` otherwise (MCP's defaults are
    /// destructive and not idempotent); else the harness decides, or, with
    /// a catalog that lacks the name, the tool is unknown.
    pub fn verdict(&self, name: &str) -> Verdict {
        let rule = self
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.covers(name))
            .max_by_key(|(i, r)| (r.specificity(), *i))
            .map(|(_, r)| r.policy);
        let tool = self.catalog.as_ref().map(|c| c.get(name));
        let verdict = match (rule, tool) {
            (Some(Policy::Deny), _) => Verdict::Policy(Policy::Deny),
            (_, Some(None)) => Verdict::Unknown,
            (Some(p), _) => Verdict::Policy(p),
            (None, Some(Some(t))) if !t.server.is_empty() => Verdict::Policy(if t.read_only {
                Policy::Auto
            } else {
                Policy::Approval
            }),
            (None, _) => Verdict::Harness,
        };
        // The policy is a floor: a denying rule wins over everything.
        debug_assert!(
            rule != Some(Policy::Deny) || verdict == Verdict::Policy(Policy::Deny),
            "a denied tool is denied"
        );
        debug_assert!(
            verdict != Verdict::Unknown || self.catalog.is_some(),
            "only a catalog can lack a tool"
        );
        verdict
    }

    /// Whether any request may expire: `--approval-timeout` or a rule with
    /// a duration.
    pub fn expires(&self) -> bool {
        self.approval_expiry_ms.is_some() || self.rules.iter().any(|r| r.expiry_ms.is_some())
    }

    /// How long a request to approve a call to `name` may wait before the
    /// host denies it: the most specific covering rule that names a
    /// duration (`approval:30m`), else `--approval-timeout`, else never.
    /// Asked of any gated call, whoever gated it: a harness's own
    /// REQUIRES_APPROVAL waits no longer than a policy's.
    pub fn expiry_ms(&self, name: &str) -> Option<u64> {
        let ruled = self
            .rules
            .iter()
            .enumerate()
            .filter(|(_, r)| r.expiry_ms.is_some() && r.covers(name))
            .max_by_key(|(i, r)| (r.specificity(), *i))
            .and_then(|(_, r)| r.expiry_ms);
        let expiry = ruled.or(self.approval_expiry_ms);
        debug_assert!(expiry.is_none_or(|ms| ms > 0), "an expiry is positive");
        expiry
    }

    /// Whether running a call to `name` twice is harmless in itself: an
    /// MCP tool that says it is read-only (no effect at all) or idempotent
    /// (no effect beyond the first). Such a call needs no durable mark
    /// before it runs; a crash simply runs it again.
    pub fn harmless_twice(&self, name: &str) -> bool {
        let harmless = self
            .catalog
            .as_ref()
            .and_then(|c| c.get(name))
            .is_some_and(|t| !t.server.is_empty() && (t.read_only || t.idempotent));
        debug_assert!(
            !harmless || self.verdict(name) != Verdict::Unknown,
            "a harmless tool is a listed one"
        );
        harmless
    }

    /// Whether a call to `name` whose earlier run started and never
    /// finished may run again. An MCP tool may only when running it twice
    /// is harmless ([`ToolGate::harmless_twice`]): its server cannot be
    /// asked whether the first run happened, and MCP's defaults are "not
    /// read-only, not idempotent". A tool built into the host checks for
    /// its own earlier effect, so it may; so may every tool of a host
    /// without a catalog, which runs only built-ins. A tool the catalog no
    /// longer lists may not: nothing vouches for it.
    pub fn may_rerun(&self, name: &str) -> bool {
        let may = match self.catalog.as_ref().map(|c| c.get(name)) {
            None => true,
            Some(None) => false,
            Some(Some(t)) => t.server.is_empty() || self.harmless_twice(name),
        };
        debug_assert!(
            may || !self.harmless_twice(name),
            "a call harmless twice may always run again"
        );
        may
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(specs: &[&str]) -> Vec<ToolRule> {
        specs.iter().map(|s| s.parse().unwrap()).collect()
    }

    fn tool(name: &str, server: &str, read_only: bool) -> CatalogTool {
        CatalogTool {
            name: name.into(),
            server: server.into(),
            read_only,
            idempotent: false,
            destructive: !read_only,
            open_world: true,
            description: String::new(),
            up: true,
        }
    }

    #[test]
    fn only_tools_harmless_twice_or_built_in_run_again_after_an_unfinished_run() {
        let mut tools = vec![
            tool("fs__edit_file", "fs", false),
            tool("fs__write_file", "fs", false),
            tool("fs__read_file", "fs", true),
            tool("append_note", "", false),
        ];
        tools[1].idempotent = true;
        let g = ToolGate {
            rules: Vec::new(),
            catalog: Some(Arc::new(Catalog::new(tools))),
            approval_expiry_ms: None,
        };
        assert!(!g.may_rerun("fs__edit_file"), "mcp default: not idempotent");
        assert!(g.may_rerun("fs__write_file"), "says it is idempotent");
        assert!(g.may_rerun("fs__read_file"), "read-only: no effect");
        assert!(g.may_rerun("append_note"), "built-ins check their effect");
        assert!(!g.may_rerun("gone__tool"), "no longer listed");
        assert!(ToolGate::default().may_rerun("anything"), "no catalog");
        // Only MCP tools harmless twice need no durable mark: a built-in's
        // check for its own effect needs the mark.
        let names = [
            "fs__edit_file",
            "fs__write_file",
            "fs__read_file",
            "append_note",
        ];
        let harmless: Vec<_> = names.into_iter().filter(|n| g.harmless_twice(n)).collect();
        assert_eq!(harmless, ["fs__write_file", "fs__read_file"]);
        assert!(!ToolGate::default().harmless_twice("append_note"));
    }

    #[test]
    fn the_listing_names_each_tools_policy() {
        let listed = gate(&["fs__write_file=deny"]).listing();
        let policies: Vec<(&str, &str)> = listed
            .tools
            .iter()
            .map(|t| (t.name.as_str(), t.policy.as_str()))
            .collect();
        assert_eq!(
            policies,
            [
                ("append_note", "harness"),
                ("fs__read_file", "auto"),
                ("fs__write_file", "deny")
            ]
        );
    }

    fn gate(specs: &[&str]) -> ToolGate {
        ToolGate {
            rules: rules(specs),
            catalog: Some(Arc::new(Catalog::new([
                tool("fs__read_file", "fs", true),
                tool("fs__write_file", "fs", false),
                tool("append_note", "", false),
            ]))),
            approval_expiry_ms: None,
        }
    }

    #[test]
    fn without_rules_read_only_mcp_tools_run_and_others_wait_for_approval() {
        let g = gate(&[]);
        assert_eq!(g.verdict("fs__read_file"), Verdict::Policy(Policy::Auto));
        assert_eq!(
            g.verdict("fs__write_file"),
            Verdict::Policy(Policy::Approval)
        );
        assert_eq!(g.verdict("append_note"), Verdict::Harness);
        assert_eq!(g.verdict("fs__nope"), Verdict::Unknown);
    }

    #[test]
    fn the_most_specific_rule_wins_and_a_later_one_breaks_ties() {
        let g = gate(&["*=approval", "fs__*=auto", "fs__write_file=deny"]);
        assert_eq!(g.verdict("fs__read_file"), Verdict::Policy(Policy::Auto));
        assert_eq!(g.verdict("fs__write_file"), Verdict::Policy(Policy::Deny));
        assert_eq!(g.verdict("append_note"), Verdict::Policy(Policy::Approval));
        let g = gate(&["fs__*=deny", "fs__*=auto"]);
        assert_eq!(g.verdict("fs__write_file"), Verdict::Policy(Policy::Auto));
    }

    #[test]
    fn deny_holds_even_for_names_the_catalog_lacks_and_no_catalog_means_the_harness_decides() {
        let g = gate(&["*__rm=deny"]);
        assert_eq!(g.verdict("x__rm"), Verdict::Policy(Policy::Deny));
        let open = ToolGate {
            rules: rules(&["danger=approval"]),
            catalog: None,
            approval_expiry_ms: None,
        };
        assert_eq!(open.verdict("anything"), Verdict::Harness);
        assert_eq!(open.verdict("danger"), Verdict::Policy(Policy::Approval));
    }

    #[test]
    fn rules_parse_and_refuse_what_they_cannot_mean() {
        let r: ToolRule = "fs__*=approval".parse().unwrap();
        assert_eq!((r.pattern.as_str(), r.policy), ("fs__*", Policy::Approval));
        assert!(matches!("fs".parse::<ToolRule>(), Err(RuleError::Shape(_))));
        assert!(matches!(
            "=auto".parse::<ToolRule>(),
            Err(RuleError::Shape(_))
        ));
        assert!(matches!(
            "fs=maybe".parse::<ToolRule>(),
            Err(RuleError::Policy(_))
        ));
    }

    #[test]
    fn an_approval_rule_may_bound_the_wait_and_the_default_covers_the_rest() {
        let r: ToolRule = "fs__write_file=approval:30m".parse().unwrap();
        assert_eq!((r.policy, r.expiry_ms), (Policy::Approval, Some(1_800_000)));
        assert!(matches!(
            "fs=approval:soon".parse::<ToolRule>(),
            Err(RuleError::Expiry(_))
        ));
        assert!(matches!(
            "fs=approval:10ms".parse::<ToolRule>(),
            Err(RuleError::Expiry(_))
        ));
        assert!(matches!(
            "fs=deny:30m".parse::<ToolRule>(),
            Err(RuleError::Policy(_))
        ));
        let mut g = gate(&["fs__*=approval:1h", "fs__write_file=approval:30m"]);
        assert_eq!(g.expiry_ms("fs__write_file"), Some(1_800_000));
        assert_eq!(g.expiry_ms("fs__read_file"), Some(3_600_000));
        assert_eq!(g.expiry_ms("append_note"), None, "no rule, no default");
        g.approval_expiry_ms = Some(60_000);
        assert_eq!(g.expiry_ms("append_note"), Some(60_000));
        assert_eq!(
            g.expiry_ms("fs__write_file"),
            Some(1_800_000),
            "a rule wins"
        );
        assert_eq!(expiry_text(1_800_000), "30m");
        assert_eq!(expiry_text(5_400_000), "1h 30m");
    }

    #[test]
    fn a_star_matches_any_run_including_none() {
        assert!(glob("*", ""));
        assert!(glob("fs__*", "fs__"));
        assert!(glob("*__write_*", "fs__write_file"));
        assert!(!glob("fs__*", "web__get"));
        assert!(!glob("a*c", "ab"));
    }
}
