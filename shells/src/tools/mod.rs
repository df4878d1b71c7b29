//! Host-executed tools: the shell that performs [`Effect::ExecuteTool`].
//!
//! The machine emits an execution only after the TOOL_CALL intent is durable,
//! and after a crash it re-drives a trailing intent once, with the recorded
//! call and key. So an execution can be seen twice for one effect; the
//! executor makes that harmless by deduplicating on (session, idempotency
//! key) through a durable [`ToolLedger`]:
//!
//! 1. a key with a stored result is answered from the ledger, the tool is not
//!    run again;
//! 2. otherwise a "started" row is committed *before* the tool runs, and the
//!    result is stored after; a call the machine says is harmless to make
//!    twice ([`Ask::repeatable`]) skips the check and the mark, and its
//!    result is stored after it is answered, without a sync (a crash just
//!    makes it again);
//! 3. a key found "started" but not "done" means a crash in between. The
//!    executor answers [`ToolError::Unfinished`] and runs nothing: whether
//!    to run it again is the machine's decision (the unknown-outcome rule,
//!    `ToolGate::may_rerun`). When it says run again, the tool runs with
//!    [`ToolContext::redrive`] set, so a tool that can check whether its
//!    effect already happened does (see [`builtin::AppendNote`]).
//!
//! A call whose turn is canceled while it runs is [`Interrupt`]ed: a tool
//! that can be stopped midway ([`Tool::interruptible`], the MCP tools) is
//! dropped, and the key is finished with [`interrupted`]'s receipt, which is
//! its answer from then on: no later execution under the key calls the tool
//! again, idempotent or not, and every answer agrees with the receipt the
//! journal records. Other tools run to completion.
//!
//! [`Effect::ExecuteTool`]: agentsessions_machine::vocab::Effect::ExecuteTool

use std::collections::BTreeMap;
#[cfg(not(madsim))]
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
#[cfg(not(madsim))]
use std::sync::Mutex;

use agentsessions_machine::vocab::{Outcome, ToolFailure};
use agentsessions_proto::v1::{ToolCall, ToolResult};

use crate::model::BoxFuture;

pub mod builtin;
/// The ledger's contract and rules (the journal crate's) and its SQLite
/// file. The madsim simulation brings its own deduplicating executor.
#[cfg(not(madsim))]
pub mod ledger {
    pub use agentsessions_journal::ledger::*;
    pub use agentsessions_sqlite::ledger::ToolLedger;
}
#[cfg(not(madsim))]
pub mod mcp;

pub use builtin::{AppendNote, EchoArgs};
#[cfg(not(madsim))]
pub use ledger::{LedgerEntry, LedgerStore, ToolLedger};

/// Longest tool name quoted in an error.
impl From<agentsessions_journal::ledger::LedgerError> for ToolError {
    fn from(e: agentsessions_journal::ledger::LedgerError) -> Self {
        ToolError::Ledger(e.0)
    }
}

#[cfg(not(madsim))]
const MAX_NAME_IN_ERROR: usize = 64;

/// Why a tool execution failed. Messages are short and never carry args,
/// content or idempotency keys: the host may record them in receipts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// No tool is registered under the call's name.
    #[error("tools: unknown tool: {0}")]
    UnknownTool(String),
    /// A tool with that name is already registered.
    #[error("tools: duplicate tool: {0}")]
    DuplicateTool(String),
    /// The call has no idempotency key, so it cannot be deduplicated.
    #[error("tools: missing idempotency key")]
    MissingIdempotencyKey,
    /// The key was first used with another tool in this session.
    #[error("tools: idempotency key reused for a different tool")]
    KeyConflict,
    /// The arguments are missing or of the wrong shape.
    #[error("tools: {tool}: invalid args: {reason}")]
    InvalidArgs {
        /// Tool name.
        tool: &'static str,
        /// Which rule was broken (fixed text).
        reason: &'static str,
    },
    /// The session id cannot name a file.
    #[error("tools: session id is not usable as a file name")]
    InvalidSession,
    /// A filesystem operation failed.
    #[error("tools: {tool}: io error: {kind}")]
    Io {
        /// Tool name.
        tool: &'static str,
        /// What kind of failure (no paths).
        kind: std::io::ErrorKind,
    },
    /// The ledger could not be read or written.
    #[error("tools: ledger: {0}")]
    Ledger(String),
    /// An earlier run under the key started and never finished, and the
    /// caller did not ask to run it again; nothing ran.
    #[error("tools: an earlier run of this call never finished")]
    Unfinished,
}

impl ToolError {
    /// The text for [`Outcome::Tool`]'s error (safe to journal).
    pub fn to_outcome_string(&self) -> String {
        self.to_string()
    }

    #[cfg(not(madsim))]
    fn unknown(name: &str) -> Self {
        Self::UnknownTool(name.chars().take(MAX_NAME_IN_ERROR).collect())
    }
}

/// How the machine asked for one execution (`ExecuteTool`'s flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ask {
    /// Run a key whose earlier run started and never finished; without it
    /// such a key is answered [`ToolError::Unfinished`].
    pub again: bool,
    /// Running the call twice is harmless in itself (an MCP tool that says
    /// it is read-only or idempotent): no "started" mark is made durable
    /// before it runs, and its result is recorded without a sync.
    pub repeatable: bool,
}

/// A request to stop a running tool call, fired by the drive loop on
/// `Effect::InterruptTool` (a Cancel met the call). Cheap to clone; one
/// whose [`Interrupter`] is dropped unfired never fires.
#[derive(Debug, Clone)]
pub struct Interrupt(Option<tokio::sync::watch::Receiver<bool>>);

/// Fires the [`Interrupt`]s it was made with.
#[derive(Debug)]
pub struct Interrupter(tokio::sync::watch::Sender<bool>);

impl Interrupt {
    /// An interrupt and the handle that fires it.
    pub fn pair() -> (Interrupter, Self) {
        let (tx, rx) = tokio::sync::watch::channel(false);
        (Interrupter(tx), Self(Some(rx)))
    }

    /// One that never fires (callers with nothing to cancel).
    pub fn never() -> Self {
        Self(None)
    }

    /// Whether it has fired.
    pub fn fired(&self) -> bool {
        self.0.as_ref().is_some_and(|rx| *rx.borrow())
    }

    /// Resolves once it has fired; never, when it cannot.
    pub async fn wait(&mut self) {
        if let Some(rx) = self.0.as_mut() {
            // The value is checked before the channel's end: a fire just
            // before the interrupter was dropped still counts.
            if rx.wait_for(|fired| *fired).await.is_ok() {
                return;
            }
        }
        std::future::pending().await
    }
}

impl Interrupter {
    /// Fires every clone of its interrupt (once is enough).
    pub fn fire(&self) {
        self.0.send_replace(true);
    }
}

/// The receipt of a call stopped because its turn was canceled. The call
/// may have reached the tool, so its outcome is unknown.
pub fn interrupted(call: &ToolCall) -> ToolResult {
    let why = "cancelled: the turn was canceled while the tool ran; its outcome is unknown";
    agentsessions_machine::events::error_receipt(&call.id, why.to_owned())
}

/// An execution result as the machine takes it.
pub fn tool_failure(result: Result<ToolResult, ToolError>) -> Result<ToolResult, ToolFailure> {
    result.map_err(|e| match e {
        ToolError::Unfinished => ToolFailure::Unfinished,
        e => ToolFailure::Error(e.to_outcome_string()),
    })
}

/// Converts an execution result into the machine's outcome.
pub fn tool_outcome(result: Result<ToolResult, ToolError>) -> Outcome {
    Outcome::Tool(tool_failure(result))
}

/// Runs a tool call for a session.
pub trait ToolExecutor: Send + Sync {
    /// Executes `call` on behalf of `session` (the dedup scope).
    fn execute<'a>(
        &'a self,
        session: &'a str,
        call: &'a ToolCall,
    ) -> BoxFuture<'a, Result<ToolResult, ToolError>>;

    /// [`ToolExecutor::execute`] as the machine asked for it (`ask`),
    /// stopped early when `interrupt` fires if the executor can (see the
    /// module docs); by default it cannot. An executor that keeps no
    /// ledger ignores `ask`.
    fn execute_interruptible<'a>(
        &'a self,
        session: &'a str,
        call: &'a ToolCall,
        ask: Ask,
        interrupt: Interrupt,
    ) -> BoxFuture<'a, Result<ToolResult, ToolError>> {
        let _ = (ask, interrupt);
        self.execute(session, call)
    }

    /// Forgets what the executor keeps for `session`, which was deleted.
    /// Executors that keep nothing have nothing to do.
    fn forget<'a>(&'a self, _session: &'a str) -> BoxFuture<'a, Result<(), ToolError>> {
        Box::pin(async { Ok(()) })
    }
}

/// What a tool is told besides the call.
#[derive(Debug, Clone, Copy)]
pub struct ToolContext<'a> {
    /// Session uid.
    pub session: &'a str,
    /// The call's idempotency key (never empty).
    pub idempotency_key: &'a str,
    /// A previous execution under this key started and never finished: the
    /// effect may already have happened, and a side-effecting tool must check
    /// before doing it again.
    pub redrive: bool,
}

/// One named tool.
pub trait Tool: Send + Sync {
    /// Runs the call. The executor overwrites the result's id.
    fn run<'a>(
        &'a self,
        cx: ToolContext<'a>,
        call: &'a ToolCall,
    ) -> BoxFuture<'a, Result<ToolResult, ToolError>>;

    /// Whether a run may be dropped midway when its turn is canceled: true
    /// for a tool whose caller tells the far side it was stopped (an MCP
    /// call sends `notifications/cancelled`). Built-ins run to completion.
    fn interruptible(&self) -> bool {
        false
    }
}

/// Tools by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.tools.keys()).finish()
    }
}

impl ToolRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The built-ins: `append_note` (writing under `notes_dir`) and `echo_args`.
    pub fn with_builtins(notes_dir: impl Into<PathBuf>) -> Self {
        let mut r = Self::new();
        r.tools.insert(
            builtin::APPEND_NOTE.to_owned(),
            Arc::new(AppendNote::new(notes_dir)),
        );
        r.tools
            .insert(builtin::ECHO_ARGS.to_owned(), Arc::new(EchoArgs));
        r
    }

    /// Adds a tool; a name can be registered once.
    pub fn register(&mut self, name: &str, tool: Arc<dyn Tool>) -> Result<(), ToolError> {
        if self.tools.contains_key(name) {
            return Err(ToolError::DuplicateTool(name.to_owned()));
        }
        self.tools.insert(name.to_owned(), tool);
        Ok(())
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }
}

#[cfg(not(madsim))]
type KeyLocks = Mutex<HashMap<(String, String), Arc<tokio::sync::Mutex<()>>>>;

/// The executor the host uses: registry lookup plus ledger dedup.
#[cfg(not(madsim))]
#[derive(Clone)]
pub struct LedgerExecutor {
    registry: Arc<ToolRegistry>,
    /// MCP servers' tools, for names no built-in has.
    mcp: Option<crate::mcp::McpHub>,
    ledger: Arc<dyn LedgerStore>,
    /// Serializes executions of one (session, key) within this process, so
    /// two concurrent deliveries cannot both see "no entry" and both run.
    locks: Arc<KeyLocks>,
}

#[cfg(not(madsim))]
impl std::fmt::Debug for LedgerExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerExecutor")
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

#[cfg(not(madsim))]
impl LedgerExecutor {
    /// An executor over `registry`, deduplicating through `ledger`.
    pub fn new(registry: ToolRegistry, ledger: ToolLedger) -> Self {
        Self::with_store(registry, Arc::new(ledger))
    }

    /// An executor over `registry`, deduplicating through any ledger store
    /// (one shared by several daemons, say).
    pub fn with_store(registry: ToolRegistry, ledger: Arc<dyn LedgerStore>) -> Self {
        Self {
            registry: Arc::new(registry),
            mcp: None,
            ledger,
            locks: Arc::default(),
        }
    }

    /// Also runs the tools of `hub`'s MCP servers (`SERVER__TOOL`).
    pub fn with_mcp(mut self, hub: crate::mcp::McpHub) -> Self {
        self.mcp = Some(hub);
        self
    }

    /// The ledger (for inspection).
    pub fn ledger(&self) -> &dyn LedgerStore {
        &*self.ledger
    }

    async fn run(
        &self,
        session: &str,
        call: &ToolCall,
        ask: Ask,
        interrupt: Interrupt,
    ) -> Result<ToolResult, ToolError> {
        let key = call.idempotency_key.as_str();
        if key.is_empty() {
            return Err(ToolError::MissingIdempotencyKey);
        }
        let tool: Arc<dyn Tool> = match self.registry.get(&call.tool) {
            Some(t) => Arc::clone(t),
            None => match self
                .mcp
                .as_ref()
                .and_then(|h| mcp::McpCall::find(h, &call.tool))
            {
                Some(t) => Arc::new(t),
                None => return Err(ToolError::unknown(&call.tool)),
            },
        };
        let slot = SlotGuard::acquire(&self.locks, session, key);
        let _held = slot.lock.lock().await;
        self.run_locked(tool.as_ref(), session, call, ask, interrupt)
            .await
    }

    async fn run_locked(
        &self,
        tool: &dyn Tool,
        session: &str,
        call: &ToolCall,
        Ask { again, repeatable }: Ask,
        mut interrupt: Interrupt,
    ) -> Result<ToolResult, ToolError> {
        let key = call.idempotency_key.as_str();
        // A call harmless to make twice skips the check and the durable
        // mark: a re-drive after a crash just makes it again.
        let entry = if repeatable {
            None
        } else {
            self.blocking(session, key, |l, s, k| l.get(s, k)).await?
        };
        let redrive = match entry {
            Some(LedgerEntry::Done { tool: t, result }) => {
                if t != call.tool {
                    return Err(ToolError::KeyConflict);
                }
                return Ok(result);
            }
            Some(LedgerEntry::Started { tool: t }) => {
                if t != call.tool {
                    return Err(ToolError::KeyConflict);
                }
                // Whether to run it again is the machine's call (the
                // unknown-outcome rule); the executor only reports.
                if !again {
                    return Err(ToolError::Unfinished);
                }
                true
            }
            None if repeatable => again,
            None => {
                let name = call.tool.clone();
                self.blocking(session, key, move |l, s, k| l.start(s, k, &name))
                    .await?;
                false
            }
        };
        let cx = ToolContext {
            session,
            idempotency_key: key,
            redrive,
        };
        // A failed run leaves the "started" row: whether a partial effect
        // happened is unknown, so a retry must take the careful path. An
        // interrupted one is finished with its receipt (see the module
        // docs); a tool that already answered keeps its answer.
        let mut result = if !tool.interruptible() {
            tool.run(cx, call).await?
        } else if interrupt.fired() {
            interrupted(call)
        } else {
            tokio::select! {
                biased;
                done = tool.run(cx, call) => done?,
                () = interrupt.wait() => interrupted(call),
            }
        };
        result.id.clone_from(&call.id);
        let (name, stored) = (call.tool.clone(), result.clone());
        if repeatable {
            // Nothing waits on it: losing it only means a re-drive makes
            // the call again, which such a call allows.
            let ledger = Arc::clone(&self.ledger);
            let (s, k) = (session.to_owned(), key.to_owned());
            tokio::task::spawn_blocking(move || {
                if let Err(e) = ledger.finish_unsynced(&s, &k, &name, &stored) {
                    tracing::warn!(error = %e, "tool ledger: result not recorded");
                }
            });
            return Ok(result);
        }
        self.blocking(session, key, move |l, s, k| l.finish(s, k, &name, &stored))
            .await?;
        Ok(result)
    }

    /// Runs a ledger operation off the async threads (SQLite commits fsync).
    async fn blocking<T, F>(&self, session: &str, key: &str, f: F) -> Result<T, ToolError>
    where
        T: Send + 'static,
        F: FnOnce(&dyn LedgerStore, &str, &str) -> Result<T, ledger::LedgerError> + Send + 'static,
    {
        let ledger = Arc::clone(&self.ledger);
        let (s, k) = (session.to_owned(), key.to_owned());
        tokio::task::spawn_blocking(move || f(&*ledger, &s, &k))
            .await
            .map_err(|_| ToolError::Ledger("worker failed".into()))?
            .map_err(ToolError::from)
    }
}

#[cfg(not(madsim))]
/// A per-(session, key) lock slot, dropped from the map when its last user
/// goes, including a user whose future was cancelled.
struct SlotGuard {
    locks: Arc<KeyLocks>,
    slot: (String, String),
    lock: Arc<tokio::sync::Mutex<()>>,
}

#[cfg(not(madsim))]
impl SlotGuard {
    fn acquire(locks: &Arc<KeyLocks>, session: &str, key: &str) -> Self {
        let slot = (session.to_owned(), key.to_owned());
        let lock = {
            let mut map = locks.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(map.entry(slot.clone()).or_default())
        };
        Self {
            locks: Arc::clone(locks),
            slot,
            lock,
        }
    }
}

#[cfg(not(madsim))]
impl Drop for SlotGuard {
    fn drop(&mut self) {
        let mut map = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        // Clones are only taken under the map lock, so the count is exact:
        // the map's copy plus ours means nobody else holds or waits.
        if Arc::strong_count(&self.lock) == 2 {
            map.remove(&self.slot);
        }
    }
}

#[cfg(not(madsim))]
impl ToolExecutor for LedgerExecutor {
    fn execute<'a>(
        &'a self,
        session: &'a str,
        call: &'a ToolCall,
    ) -> BoxFuture<'a, Result<ToolResult, ToolError>> {
        Box::pin(self.run(session, call, Ask::default(), Interrupt::never()))
    }

    fn execute_interruptible<'a>(
        &'a self,
        session: &'a str,
        call: &'a ToolCall,
        ask: Ask,
        interrupt: Interrupt,
    ) -> BoxFuture<'a, Result<ToolResult, ToolError>> {
        Box::pin(self.run(session, call, ask, interrupt))
    }

    fn forget<'a>(&'a self, session: &'a str) -> BoxFuture<'a, Result<(), ToolError>> {
        Box::pin(async move {
            self.blocking(session, "", |l, s, _| l.forget(s).map(drop))
                .await
        })
    }
}
