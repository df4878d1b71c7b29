//! Scenario families: a sequential client program (swept for crash cuts),
//! optionally followed by concurrent operations on several hosts (swept for
//! interleavings), and what must hold at the end.

use agentsessions_machine::vocab::Code;

/// Where a fork branches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    /// At the head.
    Head,
    /// At the END of the n-th execution (1-based, in journal order).
    Turn(usize),
}

/// A call that must be refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Approve the gate a fork child inherited.
    ApproveInherited,
    /// Resume the session.
    Resume,
    /// Exec new input while a gate is open.
    Exec(&'static str),
}

/// One step of a client program. Every step knows how to finish after a
/// crash: it re-reads the durable journal and retries what is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// CreateSession on `harness`; the uid goes to `slot`.
    Create {
        /// Slot for the uid.
        slot: usize,
        /// Route.
        harness: &'static str,
    },
    /// Load a Go v0.1.2 journal into `slot` (setup; not a call).
    Import {
        /// Slot for the session.
        slot: usize,
        /// Fixture name (without `.json`).
        fixture: &'static str,
    },
    /// The executor fails the first attempt for `key` (setup).
    FailTool {
        /// Idempotency key.
        key: &'static str,
    },
    /// A turn with input `text`; done when it ended (or parked on a gate).
    Exec {
        /// Session slot.
        slot: usize,
        /// Input text, unique within the scenario.
        text: &'static str,
        /// The turn parks on an approval request.
        park: bool,
    },
    /// Decide the session's pending gate.
    Approve {
        /// Session slot.
        slot: usize,
        /// Verdict.
        approved: bool,
    },
    /// Decide the last decided gate again: an exact retry answers with the
    /// committed decision, a different verdict is refused; neither writes.
    Decide {
        /// Session slot.
        slot: usize,
        /// Verdict.
        approved: bool,
        /// Expected status.
        expect: Code,
    },
    /// Resume; done when nothing is left to recover.
    Resume {
        /// Session slot.
        slot: usize,
    },
    /// Suspend.
    Suspend {
        /// Session slot.
        slot: usize,
    },
    /// Cancel the session's execution in flight; done when it is canceled.
    Cancel {
        /// Session slot.
        slot: usize,
    },
    /// Fork one child into `child`.
    Fork {
        /// Parent slot.
        slot: usize,
        /// Child slot.
        child: usize,
        /// Fork point.
        at: At,
    },
    /// DeleteSession; done when the session is durably deleted.
    Delete {
        /// Session slot.
        slot: usize,
    },
    /// A call the host must refuse with `expect`, writing nothing.
    Refuse {
        /// Session slot.
        slot: usize,
        /// The call.
        what: Refusal,
        /// Expected status.
        expect: Code,
    },
}

/// A call a [`Who`] is not allowed to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Forbid {
    /// Approve the pending gate.
    Approve,
    /// Sessions.Resume.
    Resume,
    /// Exec with input.
    Exec,
    /// Sessions.Cancel.
    Cancel,
    /// Sessions.DeleteSession.
    Delete,
    /// Sessions.Fork at the head.
    Fork,
    /// Sessions.Suspend.
    Suspend,
    /// Sessions.GetSession.
    Get,
}

/// The verified intruder making a [`Forbid`] call. Its name is
/// [`INTRUDER`]; no record, row or decision may ever carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Who {
    /// No role anywhere: refused before any read.
    Nobody,
    /// `*:reader`: may read, may not write or decide.
    Reader,
    /// `*:writer`: may write, may not decide.
    Writer,
    /// `other:admin`: every role, on another project (refused after the
    /// one row read, exactly like a missing session).
    Elsewhere,
}

/// The principal name of every [`Who`].
pub const INTRUDER: &str = "intruder";

impl Who {
    /// The grants this intruder holds.
    pub fn grants(self) -> &'static [&'static str] {
        match self {
            Self::Nobody => &[],
            Self::Reader => &["*:reader"],
            Self::Writer => &["*:writer"],
            Self::Elsewhere => &["other:admin"],
        }
    }
}

/// A client operation raced against others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RaceOp {
    /// Approve the gate pending when the race started.
    Approve {
        /// Session slot.
        slot: usize,
        /// Verdict.
        approved: bool,
    },
    /// The clock passes every approval deadline ([`crate::world::EXPIRY_MS`]
    /// and a second) and the host fires what fell due: the host's own
    /// denial of the slot's pending request, where it armed one.
    Expire {
        /// Session slot (the request whose decision is checked).
        slot: usize,
    },
    /// Sessions.Resume.
    Resume {
        /// Session slot.
        slot: usize,
    },
    /// Sessions.Suspend.
    Suspend {
        /// Session slot.
        slot: usize,
    },
    /// Sessions.Cancel of whatever is in flight.
    Cancel {
        /// Session slot.
        slot: usize,
    },
    /// Sessions.DeleteSession.
    Delete {
        /// Session slot.
        slot: usize,
    },
    /// Exec with input.
    Exec {
        /// Session slot.
        slot: usize,
        /// Input.
        text: &'static str,
    },
    /// Inputless Exec (recovers an approval-bearing turn).
    Recover {
        /// Session slot.
        slot: usize,
    },
    /// Fork one child at the head into `child`.
    Fork {
        /// Parent slot.
        slot: usize,
        /// Child slot.
        child: usize,
    },
    /// A call `who` may not make: it must be PERMISSION_DENIED in every
    /// interleaving and leave no trace.
    Forbidden {
        /// Session slot.
        slot: usize,
        /// The call.
        what: Forbid,
        /// The caller.
        who: Who,
    },
}

/// What must hold once the scenario finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Post {
    /// The executor performed exactly `n` effects for the slot's session.
    ToolEffects {
        /// Session slot.
        slot: usize,
        /// Effects.
        n: usize,
    },
    /// Exactly `n` executions of the slot's session completed.
    Completed {
        /// Session slot.
        slot: usize,
        /// Completed executions.
        n: usize,
    },
    /// A harness replay of the slot's session must fail (its harness
    /// drifts), without calling anything.
    ReplayDiverges {
        /// Session slot.
        slot: usize,
    },
    /// The slot's session is deleted.
    Deleted {
        /// Session slot.
        slot: usize,
    },
}

/// One scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Name (command line).
    pub name: &'static str,
    /// The family it belongs to.
    pub family: &'static str,
    /// The sequential program.
    pub program: Vec<Step>,
    /// Operations raced after the program, as (host, op).
    pub race: Vec<(usize, RaceOp)>,
    /// Final conditions.
    pub post: Vec<Post>,
}

impl Scenario {
    /// Hosts the scenario needs.
    pub fn hosts(&self) -> usize {
        self.race.iter().map(|(h, _)| h + 1).max().unwrap_or(1)
    }
}

fn s(name: &'static str, family: &'static str, program: Vec<Step>, post: Vec<Post>) -> Scenario {
    Scenario {
        name,
        family,
        program,
        race: Vec::new(),
        post,
    }
}

use Step::*;

fn create(harness: &'static str) -> Step {
    Create { slot: 0, harness }
}

fn exec(text: &'static str) -> Step {
    Exec {
        slot: 0,
        text,
        park: false,
    }
}

fn park(text: &'static str) -> Step {
    Exec {
        slot: 0,
        text,
        park: true,
    }
}

fn approval_flow(name: &'static str, approved: bool, fail: bool) -> Scenario {
    gated_flow(name, "approval", approved, fail)
}

/// An approval flow on `harness`, whose one tool call the host gates.
fn gated_flow(name: &'static str, harness: &'static str, approved: bool, fail: bool) -> Scenario {
    let mut program = Vec::new();
    if fail {
        program.push(FailTool { key: "k1" });
    }
    program.extend([
        create(harness),
        park("t1"),
        Approve { slot: 0, approved },
        Resume { slot: 0 },
    ]);
    let mut post = vec![Post::Completed { slot: 0, n: 1 }];
    if !fail {
        // A failed attempt performs nothing; whether a re-drive after a
        // crash performs the effect depends on where the crash cut.
        post.push(Post::ToolEffects {
            slot: 0,
            n: usize::from(approved),
        });
    }
    s(name, "approval", program, post)
}

/// Every crash-swept scenario.
pub fn crash_scenarios() -> Vec<Scenario> {
    vec![
        s(
            "echo-turn",
            "normal turn",
            vec![create("echo"), exec("t1")],
            vec![Post::Completed { slot: 0, n: 1 }],
        ),
        s(
            "multi-turn",
            "multi-turn",
            vec![create("echo"), exec("t1"), exec("t2"), exec("t3")],
            vec![Post::Completed { slot: 0, n: 3 }],
        ),
        s(
            "in-harness-tool",
            "in-harness tool",
            vec![create("reporter"), exec("t1")],
            vec![
                Post::Completed { slot: 0, n: 1 },
                Post::ToolEffects { slot: 0, n: 0 },
            ],
        ),
        s(
            "mediated-tool",
            "controller-mediated tool",
            vec![create("tools"), exec("t1"), exec("t2")],
            vec![
                Post::Completed { slot: 0, n: 2 },
                Post::ToolEffects { slot: 0, n: 1 },
            ],
        ),
        approval_flow("approval-approved", true, false),
        approval_flow("approval-denied", false, false),
        approval_flow("approval-executor-error", true, true),
        // The harness asks to run a tool at once; the policy gates it.
        gated_flow(
            "policy-floor-approved",
            crate::scripts::POLICED,
            true,
            false,
        ),
        gated_flow("policy-floor-denied", crate::scripts::POLICED, false, false),
        // An approved MCP tool that is not idempotent: a crash between its
        // effect and the ledger's record of it leaves the outcome unknown,
        // and the tool must not be called a second time.
        gated_flow("unknown-outcome", crate::scripts::ACTOR, true, false),
        // An agent loop parks mid-turn on a gated call and, resumed after
        // the decision, replays its first step and finishes.
        gated_flow("loop-park-approved", crate::scripts::LOOPER, true, false),
        gated_flow("loop-park-denied", crate::scripts::LOOPER, false, false),
        // A read-only idempotent MCP tool runs at once; a run cut the same
        // way is simply made again.
        s(
            "idempotent-rerun",
            "idempotent tool re-run",
            vec![create(crate::scripts::READER), exec("t1"), exec("t2")],
            vec![
                Post::Completed { slot: 0, n: 2 },
                Post::ToolEffects { slot: 0, n: 1 },
            ],
        ),
        s(
            "approval-dup-conflict",
            "approval duplicate/conflicting decisions",
            vec![
                create("approval"),
                park("t1"),
                Approve {
                    slot: 0,
                    approved: true,
                },
                Decide {
                    slot: 0,
                    approved: true,
                    expect: Code::Ok,
                },
                Decide {
                    slot: 0,
                    approved: false,
                    expect: Code::FailedPrecondition,
                },
                Refuse {
                    slot: 0,
                    what: Refusal::Exec("t2"),
                    expect: Code::FailedPrecondition,
                },
                Resume { slot: 0 },
                Decide {
                    slot: 0,
                    approved: true,
                    expect: Code::Ok,
                },
            ],
            vec![
                Post::ToolEffects { slot: 0, n: 1 },
                Post::Completed { slot: 0, n: 1 },
            ],
        ),
        s(
            "cancel-parked",
            "cancel",
            vec![
                create("approval"),
                park("t1"),
                Cancel { slot: 0 },
                Resume { slot: 0 },
                // The resolved gate does not block the next turn (which
                // parks on its own gate).
                park("t2"),
            ],
            vec![
                Post::ToolEffects { slot: 0, n: 0 },
                Post::Completed { slot: 0, n: 1 },
            ],
        ),
        s(
            "cancel-decided",
            "cancel",
            vec![
                create("approval"),
                park("t1"),
                Approve {
                    slot: 0,
                    approved: true,
                },
                Cancel { slot: 0 },
                Resume { slot: 0 },
            ],
            vec![
                Post::ToolEffects { slot: 0, n: 0 },
                Post::Completed { slot: 0, n: 1 },
            ],
        ),
        s(
            "delete-completed",
            "delete",
            vec![create("tools"), exec("t1"), Delete { slot: 0 }],
            vec![Post::Deleted { slot: 0 }],
        ),
        s(
            "delete-fork-parent",
            "delete",
            vec![
                create("tools"),
                exec("t1"),
                Fork {
                    slot: 0,
                    child: 1,
                    at: At::Head,
                },
                Delete { slot: 0 },
                Exec {
                    slot: 1,
                    text: "c1",
                    park: false,
                },
            ],
            vec![Post::Deleted { slot: 0 }, Post::Completed { slot: 1, n: 2 }],
        ),
        s(
            "delete-after-cancel",
            "delete",
            vec![
                create("approval"),
                park("t1"),
                Cancel { slot: 0 },
                Delete { slot: 0 },
            ],
            vec![
                Post::Deleted { slot: 0 },
                Post::ToolEffects { slot: 0, n: 0 },
            ],
        ),
        s(
            "suspend-resume",
            "suspend/resume",
            vec![
                create("echo"),
                exec("t1"),
                Suspend { slot: 0 },
                Resume { slot: 0 },
                exec("t2"),
            ],
            vec![Post::Completed { slot: 0, n: 2 }],
        ),
        s(
            "fork-head",
            "fork",
            vec![
                create("echo"),
                exec("t1"),
                Fork {
                    slot: 0,
                    child: 1,
                    at: At::Head,
                },
                Exec {
                    slot: 1,
                    text: "c1",
                    park: false,
                },
                exec("t2"),
            ],
            vec![
                Post::Completed { slot: 0, n: 2 },
                Post::Completed { slot: 1, n: 2 },
            ],
        ),
        s(
            "fork-historical",
            "fork",
            vec![
                create("tools"),
                exec("t1"),
                exec("t2"),
                Fork {
                    slot: 0,
                    child: 1,
                    at: At::Turn(1),
                },
                Exec {
                    slot: 1,
                    text: "c1",
                    park: false,
                },
            ],
            vec![
                Post::Completed { slot: 1, n: 2 },
                Post::ToolEffects { slot: 1, n: 1 },
            ],
        ),
        s(
            "fork-pending-approval",
            "fork",
            vec![
                create("approval"),
                park("t1"),
                Fork {
                    slot: 0,
                    child: 1,
                    at: At::Head,
                },
                Refuse {
                    slot: 1,
                    what: Refusal::ApproveInherited,
                    expect: Code::FailedPrecondition,
                },
                Refuse {
                    slot: 1,
                    what: Refusal::Resume,
                    expect: Code::FailedPrecondition,
                },
                Approve {
                    slot: 0,
                    approved: true,
                },
                Resume { slot: 0 },
                Exec {
                    slot: 1,
                    text: "c1",
                    park: true,
                },
                Approve {
                    slot: 1,
                    approved: true,
                },
                Resume { slot: 1 },
            ],
            vec![
                Post::ToolEffects { slot: 0, n: 1 },
                Post::ToolEffects { slot: 1, n: 1 },
                Post::Completed { slot: 1, n: 1 },
            ],
        ),
        s(
            "memory-suspend-resume",
            "memory-snapshot harness",
            vec![
                create("counter"),
                exec("t1"),
                Suspend { slot: 0 },
                Resume { slot: 0 },
                exec("t2"),
            ],
            vec![Post::Completed { slot: 0, n: 2 }],
        ),
        s(
            "memory-fork",
            "memory-snapshot harness",
            vec![
                create("counter"),
                exec("t1"),
                Fork {
                    slot: 0,
                    child: 1,
                    at: At::Head,
                },
                Exec {
                    slot: 1,
                    text: "c1",
                    park: false,
                },
            ],
            vec![Post::Completed { slot: 1, n: 2 }],
        ),
        s(
            "legacy-crashed-output",
            "legacy v0.1.2 resume",
            vec![
                Import {
                    slot: 0,
                    fixture: "crashed-output",
                },
                Resume { slot: 0 },
                exec("t2"),
            ],
            vec![],
        ),
        s(
            "legacy-crashed-input",
            "legacy v0.1.2 resume",
            vec![
                Import {
                    slot: 0,
                    fixture: "crashed-input",
                },
                Resume { slot: 0 },
                exec("t2"),
            ],
            vec![],
        ),
        s(
            "legacy-mixed-interrupted",
            "legacy v0.1.2 resume",
            vec![
                Import {
                    slot: 0,
                    fixture: "mixed-interrupted",
                },
                Resume { slot: 0 },
                exec("t2"),
            ],
            vec![],
        ),
        s(
            "drift",
            "diverging harness",
            vec![create("drift"), exec("t1")],
            vec![Post::ReplayDiverges { slot: 0 }],
        ),
        s(
            "chatter",
            "diverging harness",
            vec![create("chatter"), exec("t1")],
            vec![Post::ReplayDiverges { slot: 0 }],
        ),
    ]
}

fn race(
    name: &'static str,
    family: &'static str,
    program: Vec<Step>,
    ops: Vec<(usize, RaceOp)>,
) -> Scenario {
    Scenario {
        name,
        family,
        program,
        race: ops,
        post: Vec::new(),
    }
}

/// Every interleaving-swept scenario.
pub fn race_scenarios() -> Vec<Scenario> {
    use RaceOp as R;
    let parked = || vec![create("approval"), park("t1")];
    let decided = || {
        vec![
            create("approval"),
            park("t1"),
            Approve {
                slot: 0,
                approved: true,
            },
        ]
    };
    let mut v = vec![
        race(
            "race-expire-approve",
            "expiry racing a human decision",
            parked(),
            vec![
                (0, R::Expire { slot: 0 }),
                (
                    0,
                    R::Approve {
                        slot: 0,
                        approved: true,
                    },
                ),
            ],
        ),
        race(
            "race-expire-approve-two-hosts",
            "expiry racing a human decision on another host",
            parked(),
            vec![
                (0, R::Expire { slot: 0 }),
                (
                    1,
                    R::Approve {
                        slot: 0,
                        approved: false,
                    },
                ),
            ],
        ),
        race(
            "race-cancel-approve",
            "Cancel racing Approve and Resume",
            parked(),
            vec![
                (0, R::Cancel { slot: 0 }),
                (
                    1,
                    R::Approve {
                        slot: 0,
                        approved: true,
                    },
                ),
                (1, R::Resume { slot: 0 }),
            ],
        ),
        race(
            "race-cancel-resume",
            "Cancel racing Resume",
            decided(),
            vec![(0, R::Resume { slot: 0 }), (1, R::Cancel { slot: 0 })],
        ),
        race(
            "race-cancel-resume-one-host",
            "Cancel of a live recovery",
            decided(),
            vec![(0, R::Resume { slot: 0 }), (0, R::Cancel { slot: 0 })],
        ),
        race(
            "race-cancel-exec",
            "Cancel racing a turn on another host",
            vec![create("tools")],
            vec![
                (
                    0,
                    R::Exec {
                        slot: 0,
                        text: "t1",
                    },
                ),
                (1, R::Cancel { slot: 0 }),
            ],
        ),
        race(
            "race-cancel-exec-one-host",
            "Cancel of a live turn",
            vec![create("tools")],
            vec![
                (
                    0,
                    R::Exec {
                        slot: 0,
                        text: "t1",
                    },
                ),
                (0, R::Cancel { slot: 0 }),
            ],
        ),
        race(
            "race-delete-exec",
            "DeleteSession racing a turn on another host",
            vec![create("tools"), exec("t1")],
            vec![
                (
                    0,
                    R::Exec {
                        slot: 0,
                        text: "t2",
                    },
                ),
                (1, R::Delete { slot: 0 }),
            ],
        ),
        race(
            "race-delete-exec-one-host",
            "DeleteSession beside a live turn",
            vec![create("tools"), exec("t1")],
            vec![
                (
                    0,
                    R::Exec {
                        slot: 0,
                        text: "t2",
                    },
                ),
                (0, R::Delete { slot: 0 }),
            ],
        ),
        race(
            "race-delete-cancel",
            "DeleteSession racing the Cancel of a parked turn",
            parked(),
            vec![(0, R::Cancel { slot: 0 }), (1, R::Delete { slot: 0 })],
        ),
        race(
            "race-approve-dup",
            "duplicate Approve",
            parked(),
            vec![
                (
                    0,
                    R::Approve {
                        slot: 0,
                        approved: true,
                    },
                ),
                (
                    1,
                    R::Approve {
                        slot: 0,
                        approved: true,
                    },
                ),
            ],
        ),
        race(
            "race-approve-dup-one-host",
            "duplicate Approve",
            parked(),
            vec![
                (
                    0,
                    R::Approve {
                        slot: 0,
                        approved: true,
                    },
                ),
                (
                    0,
                    R::Approve {
                        slot: 0,
                        approved: true,
                    },
                ),
            ],
        ),
        race(
            "race-approve-conflict",
            "conflicting Approve",
            parked(),
            vec![
                (
                    0,
                    R::Approve {
                        slot: 0,
                        approved: true,
                    },
                ),
                (
                    1,
                    R::Approve {
                        slot: 0,
                        approved: false,
                    },
                ),
            ],
        ),
        race(
            "race-approve-resume",
            "Approve vs Resume",
            parked(),
            vec![
                (
                    0,
                    R::Approve {
                        slot: 0,
                        approved: true,
                    },
                ),
                (1, R::Resume { slot: 0 }),
            ],
        ),
        race(
            "race-approve-suspend",
            "Approve vs Suspend",
            parked(),
            vec![
                (
                    0,
                    R::Approve {
                        slot: 0,
                        approved: true,
                    },
                ),
                (1, R::Suspend { slot: 0 }),
            ],
        ),
        race(
            "race-approve-recover",
            "Approve vs inputless Exec",
            parked(),
            vec![
                (
                    0,
                    R::Approve {
                        slot: 0,
                        approved: false,
                    },
                ),
                (1, R::Recover { slot: 0 }),
            ],
        ),
        race(
            "race-approve-fork",
            "Approve vs Fork",
            parked(),
            vec![
                (
                    0,
                    R::Approve {
                        slot: 0,
                        approved: true,
                    },
                ),
                (1, R::Fork { slot: 0, child: 1 }),
            ],
        ),
        race(
            "race-resume-resume",
            "two recoveries of a decided gate",
            decided(),
            vec![(0, R::Resume { slot: 0 }), (1, R::Resume { slot: 0 })],
        ),
        race(
            "race-zombie-echo",
            "zombie incarnation",
            vec![create("echo")],
            vec![
                (
                    0,
                    R::Exec {
                        slot: 0,
                        text: "t1",
                    },
                ),
                (1, R::Resume { slot: 0 }),
            ],
        ),
        race(
            "race-zombie-tools",
            "zombie incarnation",
            vec![create("tools")],
            vec![
                (
                    0,
                    R::Exec {
                        slot: 0,
                        text: "t1",
                    },
                ),
                (1, R::Resume { slot: 0 }),
            ],
        ),
        race(
            "race-exec-suspend-one-host",
            "overlap guard",
            vec![create("echo")],
            vec![
                (
                    0,
                    R::Exec {
                        slot: 0,
                        text: "t1",
                    },
                ),
                (0, R::Suspend { slot: 0 }),
            ],
        ),
        race(
            "race-exec-fork",
            "Exec vs Fork",
            vec![create("echo"), exec("t1")],
            vec![
                (
                    0,
                    R::Exec {
                        slot: 0,
                        text: "t2",
                    },
                ),
                (1, R::Fork { slot: 0, child: 1 }),
            ],
        ),
        race(
            "race-delete-fork",
            "DeleteSession of a parent racing a Fork of it (the child refers to the parent's records)",
            vec![create("echo"), exec("t1")],
            vec![
                (0, R::Delete { slot: 0 }),
                (1, R::Fork { slot: 0, child: 1 }),
            ],
        ),
    ];
    v.extend(forbidden_races());
    v
}

/// Unauthorized and wrong-role callers raced against authorized work: the
/// intruder's call is refused in every interleaving and leaves no trace.
fn forbidden_races() -> Vec<Scenario> {
    use RaceOp as R;
    let parked = || vec![create("approval"), park("t1")];
    let no = |what: Forbid, who: Who| R::Forbidden { slot: 0, what, who };
    let approve = R::Approve {
        slot: 0,
        approved: true,
    };
    let turn = R::Exec {
        slot: 0,
        text: "t2",
    };
    vec![
        race(
            "race-forbidden-approve-resume",
            "unauthorized Approve racing an authorized Approve and Resume",
            parked(),
            vec![
                (0, no(Forbid::Approve, Who::Elsewhere)),
                (1, approve),
                (1, R::Resume { slot: 0 }),
            ],
        ),
        race(
            "race-writer-approves",
            "a writer's Approve racing the approver's",
            parked(),
            vec![(0, no(Forbid::Approve, Who::Writer)), (1, approve)],
        ),
        race(
            "race-forbidden-resume-approve",
            "unauthorized Resume racing an authorized Approve",
            parked(),
            vec![(0, approve), (1, no(Forbid::Resume, Who::Elsewhere))],
        ),
        race(
            "race-forbidden-cancel-exec",
            "a reader's Cancel racing a turn",
            vec![create("tools"), exec("t1")],
            vec![(0, turn), (1, no(Forbid::Cancel, Who::Reader))],
        ),
        race(
            "race-forbidden-delete-exec",
            "unauthorized Delete racing a turn on the same host",
            vec![create("tools"), exec("t1")],
            vec![(0, turn), (0, no(Forbid::Delete, Who::Elsewhere))],
        ),
        race(
            "race-forbidden-fork-exec",
            "unauthorized Fork and Exec racing a turn",
            vec![create("echo"), exec("t1")],
            vec![
                (0, turn),
                (1, no(Forbid::Fork, Who::Elsewhere)),
                (1, no(Forbid::Exec, Who::Nobody)),
            ],
        ),
        race(
            "race-forbidden-suspend-get",
            "unauthorized Suspend and Get racing a Resume",
            vec![
                create("approval"),
                park("t1"),
                Approve {
                    slot: 0,
                    approved: true,
                },
            ],
            vec![
                (0, R::Resume { slot: 0 }),
                (1, no(Forbid::Suspend, Who::Reader)),
                (1, no(Forbid::Get, Who::Elsewhere)),
            ],
        ),
    ]
}

/// Every scenario, crash-swept ones first.
pub fn all() -> Vec<Scenario> {
    let mut v = crash_scenarios();
    v.extend(race_scenarios());
    v
}

/// The scenario called `name`.
pub fn by_name(name: &str) -> Option<Scenario> {
    all().into_iter().find(|s| s.name == name)
}
