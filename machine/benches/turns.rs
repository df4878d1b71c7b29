//! Echo turns per second through the bare host state machine, and the heap
//! the host keeps per idle session. Run with
//! `cargo bench -p agentsessions-machine --bench turns`.
//!
//! A lean driver answers every effect in memory: a store that keeps records
//! and rows but computes no hashes (hashing is the journal shell's work and
//! is measured by the `canon` bench), the testkit echo harness, and an echo
//! model. So the figure is the machine's own cost per turn: the operation
//! state machines, the invocation engine, event construction, the approval
//! and execution projections over the session's journal, and rendering.
//!
//! A counting global allocator (bench only) reports allocations per turn
//! and the bytes the host still holds once every turn has finished.

// A `GlobalAlloc` can only be written with `unsafe`: the trait's methods are
// unsafe to implement. The impl below only forwards to `System` and counts.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use agentsessions_machine::events;
use agentsessions_machine::host::Host;
use agentsessions_machine::journal::Journal;
use agentsessions_machine::vocab::{
    Caller, ClientEffect, ConnId, CountingIds, Effect, EffectId, ExecuteTool, HarnessEffect,
    HarnessInput, HarnessOutcome, HostConfig, InvokeModel, ModelReply, Outcome, PutError, Request,
    RequestId, RuntimeCall, RuntimeReply, SessionRow, StoreEffect, StoreOutcome, ToolFailure,
};
use agentsessions_proto::v1::{CreateSessionRequest, ExecRequest, LogRecord, Session};
use agentsessions_testkit::harness::{Echo, Script};

/// Counts live heap bytes and allocation calls, forwarding to `System`.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards its arguments unchanged to `System`, which
// upholds the `GlobalAlloc` contract; the counters are plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same layout, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// CPU time this thread has run. The benchmark shares two cores with
/// other builds, so wall time alone would charge the machine for time it
/// spent descheduled; the thread clock has nanosecond resolution, where
/// the scheduler's accounting moves only at ticks.
fn cpu_secs() -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9)
}

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// What the driver keeps per session: the store's side, not the host's.
#[derive(Default)]
struct Stored {
    row: SessionRow,
    fence: i64,
    /// Kept as a journal, as the daemon's record cache keeps it, so a
    /// ReadJournal is a snapshot rather than a rebuild.
    records: Journal,
}

enum Input {
    Outcome(EffectId, Outcome),
    Harness(ConnId, HarnessInput),
}

/// Answers every effect in memory; see the module docs.
struct Driver {
    host: Host,
    store: BTreeMap<String, Stored>,
    conns: BTreeMap<ConnId, Echo>,
    queue: VecDeque<Input>,
    now: i64,
    next_request: u64,
    replies: usize,
    /// Time spent inside the host's `handle_*` calls: the machine's share.
    in_host: Duration,
}

impl Driver {
    fn new() -> Self {
        Self {
            host: Host::new(HostConfig::default(), Box::new(CountingIds::default())),
            store: BTreeMap::new(),
            conns: BTreeMap::new(),
            queue: VecDeque::new(),
            now: 1_700_000_000_000_000_000,
            next_request: 0,
            replies: 0,
            in_host: Duration::ZERO,
        }
    }

    fn call(&mut self, request: Request) {
        self.next_request += 1;
        self.now += 1_000;
        let replies = self.replies;
        let t = Instant::now();
        self.host
            .handle_request(
                self.now,
                RequestId(self.next_request),
                Caller::Open,
                request,
            )
            .expect("drained");
        self.in_host += t.elapsed();
        self.drain();
        while let Some(input) = self.queue.pop_front() {
            self.now += 1;
            let t = Instant::now();
            match input {
                Input::Outcome(id, o) => self.host.handle_outcome(self.now, id, o),
                Input::Harness(c, i) => self.host.handle_harness(self.now, c, i),
            }
            .expect("drained");
            self.in_host += t.elapsed();
            self.drain();
        }
        assert_eq!(self.replies, replies + 1, "the call replied");
        assert_eq!(self.host.in_flight(), 0, "a host at rest holds no session");
    }

    fn drain(&mut self) {
        while let Some(effect) = self.host.poll_effect() {
            self.perform(effect);
        }
        // The daemon reads every signal (metrics); an unread queue would
        // count against the host's heap.
        while self.host.poll_signal().is_some() {}
    }

    fn perform(&mut self, effect: Effect) {
        let (id, outcome) = match effect {
            Effect::Store(effect) => {
                let id = effect.id();
                (id, Outcome::Store(self.perform_store(effect)))
            }
            Effect::Harness(effect) => match self.perform_harness(effect) {
                Some(answer) => answer,
                None => return,
            },
            Effect::Runtime(RuntimeCall { id, .. }) => {
                let reply = RuntimeReply::Incarnation {
                    address: "local://echo".into(),
                };
                (id, Outcome::Runtime(Ok(reply)))
            }
            Effect::Model(InvokeModel { id, request, .. }) => {
                let text = request
                    .messages
                    .last()
                    .map(events::message_text)
                    .unwrap_or_default();
                let reply = ModelReply {
                    message: Some(events::assistant_text(&format!("echo:{text}"))),
                    usage: None,
                };
                (id, Outcome::Model(Ok(reply)))
            }
            // The echo harness calls no tools; a refusal fails the call,
            // which the reply check below reports.
            Effect::Tool(ExecuteTool { id, .. }) => (
                id,
                Outcome::Tool(Err(ToolFailure::Error(
                    "the echo bench runs no tools".into(),
                ))),
            ),
            Effect::Client(ClientEffect::Stream { .. })
            | Effect::ForgetTools { .. }
            | Effect::AbandonModel { .. }
            | Effect::InterruptTool { .. } => return,
            Effect::Client(ClientEffect::Reply { result, .. }) => {
                result.expect("the call succeeded");
                self.replies += 1;
                return;
            }
        };
        self.queue.push_back(Input::Outcome(id, outcome));
    }

    /// The store, cut to what an echo turn needs: no hashing, no registry.
    /// Registry effects are refused (the call then fails the reply check).
    fn perform_store(&mut self, effect: StoreEffect) -> StoreOutcome {
        let refused = || PutError::Failed("the echo bench has no registry".into());
        match effect {
            StoreEffect::Append {
                session,
                expected_last_seq,
                events,
                ..
            } => {
                let s = self.store.entry(session).or_default();
                assert_eq!(s.records.head(), expected_last_seq);
                let out: Vec<LogRecord> = events
                    .into_iter()
                    .enumerate()
                    .map(|(i, ev)| LogRecord {
                        seq: expected_last_seq + 1 + i as i64,
                        fence: s.fence,
                        event: Some(ev),
                        ..LogRecord::default()
                    })
                    .collect();
                s.records.extend(out.iter().cloned()).expect("a chain");
                s.row.last_seq = s.records.len() as i64;
                StoreOutcome::Appended(Ok(out))
            }
            // Echo turns never fork.
            StoreEffect::Fork { .. } => {
                StoreOutcome::Appended(Err(agentsessions_machine::vocab::AppendError::Failed(
                    "the echo bench does not fork".into(),
                )))
            }
            StoreEffect::MintFence { session, .. } => {
                let s = self.store.entry(session).or_default();
                s.fence += 1;
                StoreOutcome::Fence(Ok(s.fence))
            }
            // The bench host takes no leases.
            StoreEffect::HoldLease { .. } => StoreOutcome::LeaseHeld(Ok(false)),
            StoreEffect::ReadLog {
                session,
                from_seq,
                to_seq,
                ..
            } => {
                let records = self.store.get(&session).map_or(Vec::new(), |s| {
                    let to = if to_seq == 0 {
                        s.records.len()
                    } else {
                        to_seq as usize
                    };
                    let from = (from_seq as usize - 1).min(to);
                    s.records
                        .iter()
                        .skip(from)
                        .take(to - from)
                        .cloned()
                        .collect()
                });
                StoreOutcome::Log(Ok(records))
            }
            StoreEffect::ReadJournal { session, .. } => StoreOutcome::Journal(Ok(self
                .store
                .get(&session)
                .map_or_else(Journal::new, |s| s.records.clone()))),
            StoreEffect::GetSession { session, .. } => {
                StoreOutcome::Session(Ok(self.store.get(&session).map(|s| s.row.clone())))
            }
            StoreEffect::PutSession { row, .. } => {
                let uid = row.uid.clone();
                self.store.entry(uid).or_default().row = row;
                StoreOutcome::Put(Ok(()))
            }
            StoreEffect::ListSessions { .. } => StoreOutcome::SessionPage(Ok((Vec::new(), false))),
            StoreEffect::GetHarnessRow { .. } => StoreOutcome::HarnessRow(Ok(None)),
            StoreEffect::ListHarnessRows { .. } => StoreOutcome::HarnessRows(Ok(Vec::new())),
            StoreEffect::RegisterHarnessRow { .. } => StoreOutcome::Registered(Err(refused())),
            StoreEffect::RetireHarnessRow { .. } => StoreOutcome::Retired(Err(refused())),
            StoreEffect::ReserveHarnessNames { .. } => StoreOutcome::Reserved(Ok(())),
            StoreEffect::DeleteSession { session, .. } => {
                let gone = self.store.remove(&session);
                StoreOutcome::Deleted(Ok(gone.map_or(0, |s| s.records.len() as i64)))
            }
            StoreEffect::StaleSessions { .. } => {
                StoreOutcome::Stale(Ok((Vec::new(), String::new())))
            }
        }
    }

    /// Describe and Dial answer; Send and Close queue harness input.
    fn perform_harness(&mut self, effect: HarnessEffect) -> Option<(EffectId, Outcome)> {
        match effect {
            HarnessEffect::Describe { id, .. } => {
                let described = HarnessOutcome::Described(Ok(Echo::default().descriptor()));
                Some((id, Outcome::Harness(described)))
            }
            HarnessEffect::Dial { id, conn, .. } => {
                self.conns.insert(conn, Echo::default());
                Some((id, Outcome::Harness(HarnessOutcome::Dialed(Ok(())))))
            }
            HarnessEffect::Send { conn, frame, .. } => {
                if let Some(h) = self.conns.get_mut(&conn) {
                    let reply = h.on_frame(&frame);
                    for ev in reply.events {
                        self.queue
                            .push_back(Input::Harness(conn, HarnessInput::Event(ev)));
                    }
                    if reply.close {
                        self.queue
                            .push_back(Input::Harness(conn, HarnessInput::Closed));
                    }
                }
                None
            }
            HarnessEffect::Close { conn } => {
                self.conns.remove(&conn);
                None
            }
        }
    }
}

fn create(d: &mut Driver) -> String {
    d.call(Request::CreateSession(CreateSessionRequest {
        session: Some(Session::default()),
    }));
    d.store.keys().last().cloned().expect("created")
}

fn turn(session: &str, i: usize) -> Request {
    Request::Exec(ExecRequest {
        session: session.to_owned(),
        inputs: vec![events::text_message("user", &format!("hello {i}"))],
        ..ExecRequest::default()
    })
}

/// `sessions` sessions, `turns` echo turns each (round-robin, so every
/// turn reads a journal of bounded length).
struct Rates {
    /// Turns per second of time spent inside the host alone.
    machine: f64,
    /// Turns per CPU second of the whole loop (host and in-memory driver).
    cpu: f64,
    /// Turns per wall second of the whole loop.
    wall: f64,
    /// Allocation calls per turn (host and driver).
    allocs: f64,
}

fn throughput(sessions: usize, turns: usize) -> Rates {
    let mut d = Driver::new();
    let sids: Vec<String> = (0..sessions).map(|_| create(&mut d)).collect();
    let allocs = ALLOCS.load(Ordering::Relaxed);
    d.in_host = Duration::ZERO;
    let cpu = cpu_secs();
    let start = Instant::now();
    for t in 0..turns {
        for sid in &sids {
            d.call(turn(sid, t));
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = match (cpu, cpu_secs()) {
        (Some(a), Some(b)) => b - a,
        _ => elapsed,
    };
    let n = (sessions * turns) as f64;
    let allocs = (ALLOCS.load(Ordering::Relaxed) - allocs) as f64 / n;
    Rates {
        machine: n / d.in_host.as_secs_f64(),
        cpu: n / cpu,
        wall: n / elapsed,
        allocs,
    }
}

/// Cost per turn at a journal depth: `sessions` sessions are first grown to
/// at least `depth` records each (untimed), then each runs `rounds` more
/// turns, timed round by round; the median round is reported. Round-robin
/// over the sessions keeps every measured turn at about `depth` records
/// (a round adds five records per session).
fn at_depth(sessions: usize, depth: usize, rounds: usize) -> Rates {
    let mut d = Driver::new();
    let sids: Vec<String> = (0..sessions).map(|_| create(&mut d)).collect();
    let mut t = 0;
    while d.store[&sids[0]].records.len() < depth {
        for sid in &sids {
            d.call(turn(sid, t));
        }
        t += 1;
    }
    let mut runs: Vec<Rates> = (0..rounds)
        .map(|r| {
            let allocs = ALLOCS.load(Ordering::Relaxed);
            d.in_host = Duration::ZERO;
            let cpu = cpu_secs();
            let start = Instant::now();
            for sid in &sids {
                d.call(turn(sid, t + r));
            }
            let elapsed = start.elapsed().as_secs_f64();
            let cpu = match (cpu, cpu_secs()) {
                (Some(a), Some(b)) => b - a,
                _ => elapsed,
            };
            let n = sessions as f64;
            Rates {
                machine: n / d.in_host.as_secs_f64(),
                cpu: n / cpu,
                wall: n / elapsed,
                allocs: (ALLOCS.load(Ordering::Relaxed) - allocs) as f64 / n,
            }
        })
        .collect();
    runs.sort_by(|a, b| a.cpu.total_cmp(&b.cpu));
    runs.swap_remove(rounds / 2)
}

/// Heap the host itself holds after `sessions` sessions each ran one turn:
/// measured as what dropping the host gives back.
fn host_heap(sessions: usize) -> isize {
    let mut d = Driver::new();
    for i in 0..sessions {
        let sid = create(&mut d);
        d.call(turn(&sid, i));
    }
    let host = std::mem::replace(
        &mut d.host,
        Host::new(HostConfig::default(), Box::new(CountingIds::default())),
    );
    // The replacement host is allocated before the measurement starts.
    let before = live();
    drop(host);
    before - live()
}

fn main() {
    // Shape: sessions x turns per session (TURNS_SHAPE=20000x1, …).
    let (sessions, turns) = std::env::var("TURNS_SHAPE")
        .ok()
        .and_then(|v| {
            let (a, b) = v.split_once('x')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .unwrap_or((20_000, 1));
    throughput(200, 2); // warm-up
    let mut runs: Vec<Rates> = (0..3).map(|_| throughput(sessions, turns)).collect();
    runs.sort_by(|a, b| a.machine.total_cmp(&b.machine));
    let m = &runs[1];
    println!(
        "echo turns ({sessions} sessions x {turns}): machine alone median {:.0} turns/s \
         ({:.2} µs/turn; runs {:.0} / {:.0} / {:.0}); with the in-memory driver {:.0} turns \
         per CPU-second, {:.0} per wall second; {:.0} allocations/turn",
        m.machine,
        1e6 / m.machine,
        runs[0].machine,
        runs[1].machine,
        runs[2].machine,
        m.cpu,
        m.wall,
        m.allocs,
    );
    // Constant cost per turn: the same echo turn at 10 and at 10 000
    // records of the session's journal.
    let shallow = at_depth(100, 10, 5);
    let deep = at_depth(100, 10_000, 5);
    println!(
        "echo turn at 10 records: {:.2} µs CPU ({:.2} µs in the machine), {:.0} allocations; \
         at 10000 records: {:.2} µs CPU ({:.2} µs in the machine), {:.0} allocations; \
         ratio deep/shallow: CPU {:.2}x, machine {:.2}x, allocations {:.2}x",
        1e6 / shallow.cpu,
        1e6 / shallow.machine,
        shallow.allocs,
        1e6 / deep.cpu,
        1e6 / deep.machine,
        deep.allocs,
        shallow.cpu / deep.cpu,
        shallow.machine / deep.machine,
        deep.allocs / shallow.allocs,
    );
    let one = host_heap(1);
    let many = host_heap(10_000);
    println!(
        "host heap after all turns finished: {one} B with 1 session, {many} B with 10000 sessions ({:.2} B per idle session)",
        (many - one) as f64 / 9_999.0
    );
}
