//! Planted bugs for the simulator's mutation check (`sim/tests/teeth.rs`).
//!
//! Each [`Fault`] names one deliberate bug that is checked at exactly one
//! place in the machine (or in the memory tables / the simulator's store). A
//! fault is armed per thread, so parallel tests in one binary do not see
//! each other's faults, and nothing is armed unless a test arms it. The
//! module only exists under `cfg(test)` or the `faults` feature, which only
//! the simulator enables; the daemon never builds it.

use std::cell::Cell;

/// One planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// The store accepts an append whose fence is older than the stored one.
    SkipFenceCheck,
    /// The store acknowledges an append before it is durable.
    AckBeforeDurable,
    /// A controller-mediated tool runs before its TOOL_CALL is durable.
    ExecuteBeforeDurable,
    /// A gated call inherited through a fork counts as owned.
    AcceptInheritedApproval,
    /// A recorded model result is served without the input-hash check (I0).
    SkipInputHashCheck,
    /// Resume reuses the journal's last fence instead of minting its own.
    ResumeWithoutFence,
    /// The store ignores `expected_last_seq` (no CAS).
    DropCas,
    /// Replay runs the executor for a recorded tool result.
    ReexecuteOnReplay,
    /// A decided-denied gate runs its tool anyway.
    DenialExecutes,
    /// Recovery picks a canceled execution as pending and re-drives it.
    RedriveCanceled,
    /// A delete writes its tombstone but leaves the session in place.
    DeleteKeepsRecords,
    /// Writes to a deleted uid are not refused, so a racing writer brings
    /// the session back.
    IgnoreTombstone,
    /// The authorization gate admits a call once the session row exists,
    /// whatever its project.
    SkipProjectCheck,
    /// A journal's summary stops following the gate records appended to
    /// it, so the host decides from a stale approval state.
    StaleSummary,
    /// The host's tool policy no longer raises a call's mediation: a tool
    /// the operator gates runs when the harness asks to run it at once.
    SkipPolicyFloor,
    /// A call whose earlier run never finished runs again, though its tool
    /// does not say it is idempotent (the unknown-outcome rule is skipped).
    RerunUnfinished,
    /// The host's denial at expiry ignores a decision already recorded,
    /// so a request ends up decided twice.
    ExpiryIgnoresDecision,
}

impl Fault {
    /// Every planted bug, in a fixed order.
    pub const ALL: [Fault; 17] = [
        Fault::SkipFenceCheck,
        Fault::AckBeforeDurable,
        Fault::ExecuteBeforeDurable,
        Fault::AcceptInheritedApproval,
        Fault::SkipInputHashCheck,
        Fault::ResumeWithoutFence,
        Fault::DropCas,
        Fault::ReexecuteOnReplay,
        Fault::DenialExecutes,
        Fault::RedriveCanceled,
        Fault::DeleteKeepsRecords,
        Fault::IgnoreTombstone,
        Fault::SkipProjectCheck,
        Fault::StaleSummary,
        Fault::SkipPolicyFloor,
        Fault::RerunUnfinished,
        Fault::ExpiryIgnoresDecision,
    ];

    /// A stable kebab-case name (used on command lines).
    pub fn name(self) -> &'static str {
        match self {
            Fault::SkipFenceCheck => "skip-fence-check",
            Fault::AckBeforeDurable => "ack-before-durable",
            Fault::ExecuteBeforeDurable => "execute-before-durable",
            Fault::AcceptInheritedApproval => "accept-inherited-approval",
            Fault::SkipInputHashCheck => "skip-input-hash-check",
            Fault::ResumeWithoutFence => "resume-without-fence",
            Fault::DropCas => "drop-cas",
            Fault::ReexecuteOnReplay => "reexecute-on-replay",
            Fault::DenialExecutes => "denial-executes",
            Fault::RedriveCanceled => "redrive-canceled",
            Fault::DeleteKeepsRecords => "delete-keeps-records",
            Fault::IgnoreTombstone => "ignore-tombstone",
            Fault::SkipProjectCheck => "skip-project-check",
            Fault::StaleSummary => "stale-summary",
            Fault::SkipPolicyFloor => "skip-policy-floor",
            Fault::RerunUnfinished => "rerun-unfinished",
            Fault::ExpiryIgnoresDecision => "expiry-ignores-decision",
        }
    }

    /// The fault called `name`, if any.
    pub fn by_name(name: &str) -> Option<Fault> {
        Self::ALL.into_iter().find(|f| f.name() == name)
    }

    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

thread_local! {
    static ARMED: Cell<u32> = const { Cell::new(0) };
}

/// True when `fault` is armed on this thread.
#[inline]
pub fn active(fault: Fault) -> bool {
    ARMED.with(|a| a.get() & fault.bit() != 0)
}

/// Arms `fault` on this thread until the guard drops.
#[must_use = "the fault is disarmed when the guard drops"]
pub fn arm(fault: Fault) -> Armed {
    ARMED.with(|a| a.set(a.get() | fault.bit()));
    Armed(fault)
}

/// Keeps a fault armed; disarms it on drop.
#[derive(Debug)]
pub struct Armed(Fault);

impl Drop for Armed {
    fn drop(&mut self) {
        ARMED.with(|a| a.set(a.get() & !self.0.bit()));
    }
}
