//! The command line of `agentctl`: subcommands and flags (clap derive).
//!
//! Kept in the library so the binary stays about behaviour, and so tests can
//! parse argument vectors without spawning a process.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::cli::exit::UsageError;

/// Client of the agentsessions daemon: sessions, turns, replay, fork,
/// approvals and the harness registry.
#[derive(Debug, Parser)]
#[command(name = "agentctl", version, about, propagate_version = true)]
pub struct Cli {
    #[command(flatten)]
    pub common: Common,
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand accepts (before or after its name).
#[derive(Debug, Args)]
pub struct Common {
    /// Sessions address (host:port) of a running agentsessionsd. Without it
    /// an embedded daemon serves this one command from --journal.
    #[arg(long, global = true, value_name = "HOST:PORT")]
    pub server: Option<String>,
    /// SQLite journal of the embedded daemon (ignored with --server).
    #[arg(long, global = true, default_value = "agentsessions.db")]
    pub journal: PathBuf,
    /// Project for new sessions and for `list`.
    #[arg(long, global = true, default_value = "default")]
    pub project: String,
    /// Print proto3-JSON (proto field names) instead of text lines.
    #[arg(long, global = true)]
    pub json: bool,
    /// Bearer credential (an API key or a JWT) sent on every call; the
    /// environment keeps it out of argv and shell history.
    #[arg(
        long,
        global = true,
        env = "AGENTSESSIONS_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// PEM CA that signed the server's certificate: talk TLS (also implied
    /// by an https:// --server).
    #[arg(long, global = true, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// PEM client certificate to present (mTLS), with --tls-key.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, global = true, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
}

impl Common {
    /// Where `harness` commands go: the `--registry` address, or `None` for
    /// the embedded daemon's registry on `--journal`.
    ///
    /// `--server` alone is refused rather than ignored: the Sessions port
    /// does not serve HarnessRegistry, and falling back to the embedded
    /// daemon would show (and create) a local journal while the user meant
    /// a remote one.
    pub fn registry_target(&self, registry: Option<String>) -> Result<Option<String>, UsageError> {
        match (registry, &self.server) {
            (Some(addr), _) => Ok(Some(addr)),
            (None, Some(server)) => Err(UsageError(format!(
                "--server {server} is a sessions address; harness commands talk to the registry \
                 listener: pass --registry HOST:PORT (the daemon's --registry-addr)"
            ))),
            (None, None) => Ok(None),
        }
    }
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a session; prints its UID.
    Create {
        #[arg(long, default_value = "")]
        name: String,
        /// Harness (empty: the server's default).
        #[arg(long, default_value = "")]
        harness: String,
        #[arg(long, default_value = "")]
        model: String,
    },
    /// List the project's sessions, newest first (walks every page).
    List {
        /// Page size per call (0: the server's default).
        #[arg(long, default_value_t = 0)]
        page_size: i32,
    },
    /// Show one session's metadata and any pending approval.
    Get {
        #[arg(long)]
        session: String,
    },
    /// Run one turn and print each record as it commits.
    Exec {
        /// Session to continue (empty: create one).
        #[arg(long, default_value = "")]
        session: String,
        /// The user's message (omit to re-drive an interrupted turn).
        #[arg(long)]
        input: Option<String>,
        /// Harness of a new session, or an override for this turn.
        #[arg(long, default_value = "")]
        harness: String,
    },
    /// Print a session's records from the journal (no model calls).
    Replay {
        #[arg(long)]
        session: String,
        #[arg(long, default_value_t = 1)]
        from: i64,
        /// Last seq to print (0: the head).
        #[arg(long, default_value_t = 0)]
        to: i64,
    },
    /// Check the session's hash chain end to end.
    Verify {
        #[arg(long)]
        session: String,
    },
    /// Fork children off a session at a seq.
    Fork {
        #[arg(long)]
        session: String,
        /// Seq to fork at (0: the head).
        #[arg(long, default_value_t = 0)]
        at: i64,
        /// Number of children (default 1, or the number of --names).
        #[arg(long)]
        count: Option<i32>,
        /// Comma-separated child names, one per child.
        #[arg(long, value_delimiter = ',')]
        names: Vec<String>,
    },
    /// Suspend a session (its compute goes cold).
    Suspend {
        #[arg(long)]
        session: String,
    },
    /// Resume a session (re-drives a decided or interrupted turn).
    Resume {
        #[arg(long)]
        session: String,
    },
    /// Cancel the session's execution in flight (running, parked on an
    /// approval, or interrupted): nothing of it runs again.
    Cancel {
        #[arg(long)]
        session: String,
        /// The execution to cancel; the session's current one by default.
        #[arg(long, default_value = "")]
        execution: String,
        /// Recorded in the journal's CANCEL marker.
        #[arg(long, default_value = "")]
        reason: String,
    },
    /// Delete a session for good: its records, row and tool-ledger entries.
    /// Refused while an execution is in flight (cancel it first).
    Delete {
        #[arg(long)]
        session: String,
    },
    /// Approve a gated tool call, then resume the turn and print its records.
    Approve(Decide),
    /// Deny a gated tool call, then resume the turn and print its records.
    Deny(Decide),
    /// Administer the harness registry.
    Harness {
        /// HarnessRegistry address (the daemon's --registry-addr); the
        /// Sessions address of --server does not serve it. Without it an
        /// embedded daemon serves the registry from --journal.
        #[arg(long, global = true, value_name = "HOST:PORT")]
        registry: Option<String>,
        // Harness commands refuse --server without --registry
        // (`Common::registry_target`), so their help must not offer it. An
        // arg of the same id here stops clap propagating the visible global
        // one; being global too, its value still reaches `Common::server`.
        #[arg(long, global = true, hide = true, value_name = "HOST:PORT")]
        server: Option<String>,
        #[command(subcommand)]
        command: HarnessCommand,
    },
    /// Work on journals directly, offline (no daemon may be writing them).
    Journal {
        #[command(subcommand)]
        command: JournalCommand,
    },
    /// List the host's tools (built-ins and MCP servers' tools), each with
    /// its server, the policy its calls meet, its hints and whether its
    /// server is up.
    Tools,
    /// Print the version.
    Version,
}

/// The offline journal subcommands. A journal is a SQLite file path or a
/// `postgres://` URL.
#[derive(Debug, Subcommand)]
pub enum JournalCommand {
    /// Copy every session, record (stored bytes and hashes verbatim),
    /// registry row and tombstone from one journal to another; rerun an
    /// interrupted copy to finish it.
    Copy {
        #[arg(long, value_name = "JOURNAL")]
        from: String,
        #[arg(long, value_name = "JOURNAL")]
        to: String,
        /// CA of the PostgreSQL server(s), for TLS (`sslmode=require`).
        #[arg(long, env = "AGENTSESSIONS_JOURNAL_CA", value_name = "FILE")]
        journal_ca: Option<PathBuf>,
    },
    /// Check every session's hash chain in a journal.
    Verify {
        /// (Not `journal`: that is the global --journal's id.)
        #[arg(value_name = "JOURNAL")]
        store: String,
        /// CA of the PostgreSQL server, for TLS (`sslmode=require`).
        #[arg(long, env = "AGENTSESSIONS_JOURNAL_CA", value_name = "FILE")]
        journal_ca: Option<PathBuf>,
    },
}

/// Which approval to decide, and the provenance of the decision.
#[derive(Debug, Args)]
pub struct Decide {
    /// The session (or give it as the only positional argument).
    #[arg(long, conflicts_with = "uid")]
    pub session: Option<String>,
    #[arg(value_name = "SESSION")]
    pub uid: Option<String>,
    /// Execution id of the gated call (with --call and --request-seq).
    #[arg(long, requires_all = ["call", "request_seq"])]
    pub execution: Option<String>,
    /// Tool call id of the gated call.
    #[arg(long, alias = "tool-call", requires_all = ["execution", "request_seq"])]
    pub call: Option<String>,
    /// Seq of the APPROVAL_REQUEST record.
    #[arg(long, requires_all = ["execution", "call"])]
    pub request_seq: Option<i64>,
    /// Decide the session's pending approval (the default without a tuple).
    #[arg(long, conflicts_with_all = ["execution", "call", "request_seq"])]
    pub pending: bool,
    #[arg(long, default_value = "")]
    pub reason: String,
    /// Who decided (recorded as provenance, not enforced).
    #[arg(long, default_value = "")]
    pub actor: String,
    #[arg(long, default_value = "")]
    pub identity_issuer: String,
    #[arg(long, default_value = "")]
    pub identity_subject: String,
    /// Only commit the decision: the turn stays parked until `resume`.
    #[arg(long)]
    pub no_resume: bool,
    /// Resume after the decision (the default; accepted so scripts written
    /// when it had to be asked for keep working).
    #[arg(long, hide = true, conflicts_with = "no_resume")]
    pub resume: bool,
}

/// The harness registry subcommands.
#[derive(Debug, Subcommand)]
pub enum HarnessCommand {
    /// Register a remote harness from a proto-JSON HarnessSpec file.
    Register {
        #[arg(long)]
        name: String,
        #[arg(long)]
        spec: PathBuf,
    },
    /// Show a registration (with --observe, also Describe it live).
    Get {
        #[arg(long)]
        name: String,
        #[arg(long)]
        observe: bool,
    },
    /// List registrations (walks every page).
    List {
        #[arg(long)]
        include_retired: bool,
        /// Page size per call (0: 50; at most 500).
        #[arg(long, default_value_t = 0)]
        page_size: i32,
    },
    /// Retire a registration: new sessions are refused, existing ones go on.
    Retire {
        #[arg(long)]
        name: String,
        #[arg(long, default_value = "")]
        reason: String,
    },
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        // Catches, among others, an argument id shared with a global flag.
        <Cli as clap::CommandFactory>::command().debug_assert();
    }

    #[test]
    fn journal_verify_takes_the_journal_as_its_argument() {
        let cli =
            Cli::try_parse_from(["agentctl", "journal", "verify", "postgres://h/db"]).unwrap();
        let Command::Journal {
            command: JournalCommand::Verify { store, .. },
        } = cli.command
        else {
            panic!("{:?}", cli.command);
        };
        assert_eq!(store, "postgres://h/db");
    }

    #[test]
    fn common_flags_go_before_or_after_the_subcommand() {
        let cli = Cli::try_parse_from([
            "agentctl",
            "--json",
            "get",
            "--session",
            "s",
            "--journal",
            "x.db",
        ])
        .unwrap();
        assert!(cli.common.json);
        assert_eq!(cli.common.journal, PathBuf::from("x.db"));
        assert!(matches!(cli.command, Command::Get { session } if session == "s"));
    }

    #[test]
    fn the_approval_tuple_is_all_or_nothing_and_excludes_pending() {
        let parse = |args: &[&str]| {
            Cli::try_parse_from(["agentctl", "approve", "--session", "s"].iter().chain(args))
        };
        assert!(parse(&[]).is_ok());
        assert!(parse(&["--pending"]).is_ok());
        assert!(parse(&["--execution", "e", "--call", "c", "--request-seq", "4"]).is_ok());
        assert!(parse(&["--execution", "e"]).is_err());
        assert!(
            parse(&[
                "--pending",
                "--execution",
                "e",
                "--call",
                "c",
                "--request-seq",
                "4"
            ])
            .is_err()
        );
        let cli = Cli::try_parse_from([
            "agentctl",
            "deny",
            "sess-1",
            "--tool-call",
            "c",
            "--execution",
            "e",
            "--request-seq",
            "2",
        ])
        .unwrap();
        let Command::Deny(d) = cli.command else {
            panic!("deny")
        };
        assert_eq!(d.uid.as_deref(), Some("sess-1"));
        assert_eq!(d.call.as_deref(), Some("c"));
    }

    #[test]
    fn harness_commands_refuse_a_sessions_server_without_a_registry() {
        let common = |args: &[&str]| {
            let cli = Cli::try_parse_from(["agentctl"].iter().chain(args)).unwrap();
            let Command::Harness { registry, .. } = cli.command else {
                panic!("harness")
            };
            cli.common.registry_target(registry)
        };
        let e = common(&["--server", "h:1", "harness", "list"]).unwrap_err();
        assert!(e.0.contains("--registry HOST:PORT"), "{e}");
        assert_eq!(
            common(&["--server", "h:1", "harness", "list", "--registry", "h:2"]).unwrap(),
            Some("h:2".to_owned())
        );
        assert_eq!(common(&["harness", "list"]).unwrap(), None);
    }

    #[test]
    fn approve_resumes_unless_told_not_to() {
        let decide = |args: &[&str]| {
            let cli = Cli::try_parse_from(["agentctl", "approve", "s"].iter().chain(args));
            cli.map(|cli| match cli.command {
                Command::Approve(d) => d.no_resume,
                _ => panic!("approve"),
            })
        };
        assert!(!decide(&[]).unwrap());
        assert!(!decide(&["--resume"]).unwrap());
        assert!(decide(&["--no-resume"]).unwrap());
        assert!(decide(&["--no-resume", "--resume"]).is_err());
    }

    #[test]
    fn fork_names_split_on_commas() {
        let cli =
            Cli::try_parse_from(["agentctl", "fork", "--session", "s", "--names", "a,b"]).unwrap();
        let Command::Fork { names, count, .. } = cli.command else {
            panic!("fork")
        };
        assert_eq!(names, ["a", "b"]);
        assert_eq!(count, None);
    }
}
