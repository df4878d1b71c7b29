//! One run of a scenario: the world, the client, and the choices an
//! explorer can make at each step.
//!
//! A run has three phases. The **program** runs on host 0 with FIFO
//! delivery; crashes may cut it anywhere. Then, for race scenarios, every
//! host restarts cleanly and the **race** operations start, in any order,
//! with their effects and answers interleaved in any order. Finally
//! [`Run::finish`] settles what the race left (approves pending gates,
//! resumes pending turns) and checks the end state: the whole journal, each
//! session's rendering, a Replay and a harness replay of each session, and
//! the scenario's own conditions.

use agentsessions_machine::journal::approval;
use agentsessions_machine::vocab::{
    Caller, Code, Principal, Request, RequestId, Response, Status, StreamItem,
};
use agentsessions_proto::v1::{ApprovalRef, GetSessionRequest, LogRecord, ReplayRequest};

use crate::client::{self, Action, Client};
use crate::digest::Fnv;
use crate::oracle::{Check, JournalView, Rule, Violation, violation};
use crate::scenario::{Forbid, INTRUDER, Post, RaceOp, Scenario, Who};
use crate::store::CrashVariant;
use crate::trace::{describe, request_brief};
use crate::world::{Call, Durable, Sim};

/// Steps after which a run counts as runaway.
const MAX_STEPS: u64 = 20_000;

/// Where the Go fixtures live (beside the repository).
pub const FIXTURES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/fixtures/go-v0.1.2"
);

/// One choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// Perform or deliver item `i`.
    Item(usize),
    /// Start race operation `j`.
    Start(usize),
    /// Crash every host.
    Crash(CrashVariant),
    /// Lose the pending write's answer on its live host, the write kept
    /// (`true`) or dropped (`false`).
    LoseAnswer(bool),
}

/// The state a run can restart from without replaying: everything but the
/// hosts (which a crash or a clean restart replaces anyway).
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The durable world.
    pub d: Durable,
    /// The client.
    pub client: Client,
    /// Crashes still allowed.
    pub crashes_left: u32,
    /// Steps taken to get here (for repro paths).
    pub steps: u64,
}

impl Checkpoint {
    /// A stable digest of what determines the run from here on.
    pub fn digest(&self) -> u64 {
        use std::hash::Hash;
        let mut h = Fnv::default();
        self.d.store.digest(&mut h);
        self.client.hash(&mut h);
        h.u64(u64::from(self.crashes_left));
        h.u64(self.d.executor.fail_first.len() as u64);
        for key in &self.d.executor.fail_first {
            h.str(key);
        }
        h.u64(self.d.executor.effects);
        // Harness starts decide whether a drifting harness has drifted.
        for (session, n) in &self.d.starts {
            h.str(session).u64(u64::from(*n));
        }
        h.finish()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum RaceState {
    Waiting,
    Running(usize, RequestId),
    Done,
}

/// A run. See the module docs.
pub struct Run<'a> {
    /// The scenario.
    pub scn: &'a Scenario,
    /// The world.
    pub sim: Sim,
    /// The client.
    pub client: Client,
    inflight: Option<RequestId>,
    /// The replies of raced Approve calls, by slot, for [`Run::check_expiry`].
    decided: Vec<(usize, Result<Response, Status>)>,
    crashes_left: u32,
    race: Vec<RaceState>,
    racing: bool,
    /// Stop at the end of the program instead of starting the race.
    pub stop_at_race: bool,
    steps: u64,
    /// When set, a line per step (for printed traces).
    pub trace: Option<Vec<String>>,
}

impl<'a> Run<'a> {
    /// A run of `scn` from the start, allowing `crashes` crashes.
    pub fn new(scn: &'a Scenario, crashes: u32) -> Self {
        Self::from_checkpoint(
            scn,
            Checkpoint {
                d: Durable::default(),
                client: Client::default(),
                crashes_left: crashes,
                steps: 0,
            },
        )
    }

    /// A run continuing from `cp` on fresh hosts.
    pub fn from_checkpoint(scn: &'a Scenario, cp: Checkpoint) -> Self {
        Self {
            scn,
            sim: Sim::new(cp.d, scn.hosts()),
            client: cp.client,
            inflight: None,
            decided: Vec::new(),
            crashes_left: cp.crashes_left,
            race: vec![RaceState::Waiting; scn.race.len()],
            racing: false,
            stop_at_race: false,
            steps: cp.steps,
            trace: None,
        }
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// True while the sequential program runs.
    pub fn in_program(&self) -> bool {
        !self.racing
    }

    /// The checkpoint a crash with `variant` would lead to.
    pub fn crashed(&self, variant: CrashVariant) -> Result<Checkpoint, Violation> {
        assert!(self.crashes_left > 0 && !self.racing);
        let mut client = self.client.clone();
        client.on_crash();
        Ok(Checkpoint {
            d: self.sim.crashed(variant)?,
            client,
            crashes_left: self.crashes_left - 1,
            steps: self.steps + 1,
        })
    }

    /// The checkpoint the race phase starts from (program done, quiet).
    pub fn race_checkpoint(&self) -> Checkpoint {
        assert!(self.program_done() && self.sim.items().is_empty() && !self.racing);
        Checkpoint {
            d: self.sim.d.clone(),
            client: self.client.clone(),
            crashes_left: 0,
            steps: self.steps,
        }
    }

    /// Starts the race phase from a checkpoint taken by
    /// [`Run::race_checkpoint`] (the hosts are already fresh).
    pub fn begin_race(&mut self) {
        self.racing = true;
    }

    fn program_done(&self) -> bool {
        self.client.finished(&self.scn.program) && self.inflight.is_none()
    }

    /// Lets the client act while it can (these are not choices).
    fn advance(&mut self) -> Check {
        loop {
            if let Some(id) = self.inflight {
                let Some(reply) = self.sim.call(0, id).and_then(|c| c.reply.clone()) else {
                    if self.sim.items().is_empty() {
                        return Err(violation(Rule::Liveness, "a call never replied"));
                    }
                    return Ok(());
                };
                self.sim.forget(0, id);
                self.inflight = None;
                self.client
                    .on_reply(&self.scn.program, &self.sim.d.store, &reply)?;
            }
            if !self.sim.items().is_empty() {
                return Ok(());
            }
            match self.client.next(&self.scn.program, &self.sim.d.store)? {
                None => break,
                Some(Action::Call(session, req)) => {
                    if let Some(t) = &mut self.trace {
                        t.push(format!("client: {}", request_brief(&req)));
                    }
                    self.inflight = Some(self.sim.request(0, &session, req)?);
                }
                Some(Action::Import(uid, fixture)) => self.import(&uid, fixture)?,
                Some(Action::FailTool(key)) => {
                    self.sim.d.executor.fail_first.insert(key.to_owned());
                }
            }
        }
        if !self.scn.race.is_empty() && !self.racing && !self.stop_at_race {
            // Every host restarts cleanly before the race, as the race
            // checkpoint does, so a replay from the start matches it.
            self.sim.restart();
            self.racing = true;
        }
        if self.racing {
            self.collect_race_replies()?;
        }
        Ok(())
    }

    fn import(&mut self, uid: &str, fixture: &str) -> Check {
        let path = format!("{FIXTURES}/{fixture}.json");
        let text = std::fs::read_to_string(&path)
            .map_err(|e| violation(Rule::Expectation, format!("fixture {path}: {e}")))?;
        let records = agentsessions_testkit::interop::parse_go_records(&text)
            .map_err(|e| violation(Rule::Expectation, format!("fixture {fixture}: {e}")))?;
        let now = self.sim.d.now;
        self.sim.d.store.import(uid, records, now);
        Ok(())
    }

    fn collect_race_replies(&mut self) -> Check {
        for j in 0..self.race.len() {
            let RaceState::Running(host, id) = self.race[j] else {
                continue;
            };
            let Some(reply) = self.sim.call(host, id).and_then(|c| c.reply.clone()) else {
                if self.sim.items().is_empty() {
                    return Err(violation(Rule::Liveness, "a raced call never replied"));
                }
                continue;
            };
            self.sim.forget(host, id);
            self.race[j] = RaceState::Done;
            if let RaceOp::Forbidden { what, who, .. } = self.scn.race[j].1 {
                check_refused(what, who, &reply)?;
            }
            if let RaceOp::Approve { slot, .. } = self.scn.race[j].1 {
                self.decided.push((slot, reply.clone()));
            }
            if let (RaceOp::Fork { child, .. }, Ok(Response::Fork(f))) =
                (self.scn.race[j].1, &reply)
                && let Some(uid) = f.children.first().and_then(|s| s.metadata.as_ref())
            {
                self.client.set_slot(child, uid.uid.clone());
            }
        }
        Ok(())
    }

    /// The choices available now; empty when the run is over. Choice 0 is
    /// the default (FIFO, the next race operation, no crash).
    pub fn moves(&mut self) -> Result<Vec<Move>, Violation> {
        self.advance()?;
        let mut v = Vec::new();
        if self.racing {
            v.extend(self.sim.enabled(true).into_iter().map(Move::Item));
            v.extend(
                (0..self.race.len())
                    .filter(|&j| self.race[j] == RaceState::Waiting)
                    .map(Move::Start),
            );
        } else if !self.sim.items().is_empty() {
            v.push(Move::Item(0));
        }
        if !v.is_empty() && self.crashes_left > 0 {
            v.extend(
                self.sim
                    .d
                    .store
                    .crash_variants()
                    .into_iter()
                    .map(Move::Crash),
            );
            if self.sim.answer_losable() {
                v.extend([Move::LoseAnswer(true), Move::LoseAnswer(false)]);
            }
        }
        Ok(v)
    }

    /// Takes a choice.
    pub fn apply(&mut self, m: Move) -> Check {
        self.steps += 1;
        if self.steps > MAX_STEPS {
            return Err(violation(Rule::Liveness, "runaway: too many steps"));
        }
        if let Some(t) = &mut self.trace {
            t.push(match m {
                Move::Item(i) => describe(&self.sim.items()[i]),
                Move::Start(j) => format!("start race op {j}: {:?}", self.scn.race[j]),
                Move::Crash(v) => format!("CRASH ({})", v.label()),
                Move::LoseAnswer(kept) => format!("ANSWER LOST (write kept: {kept})"),
            });
        }
        match m {
            Move::Item(i) => self.sim.step(i),
            Move::Start(j) => self.start_race(j),
            Move::Crash(v) => {
                self.crashes_left -= 1;
                self.client.on_crash();
                self.inflight = None;
                for r in &mut self.race {
                    if matches!(r, RaceState::Running(..)) {
                        *r = RaceState::Done;
                    }
                }
                self.sim.crash(v)
            }
            Move::LoseAnswer(kept) => {
                self.crashes_left -= 1;
                self.client.on_lost_answer();
                self.sim.lose_answer(kept)
            }
        }
    }

    fn start_race(&mut self, j: usize) -> Check {
        let (host, op) = self.scn.race[j];
        let sid = |slot: usize| self.client.slots.get(slot).cloned().unwrap_or_default();
        let (session, req) = match op {
            RaceOp::Approve { slot, approved } => {
                let s = sid(slot);
                let records = &*self.sim.d.store.records(&s);
                let gate = client::awaiting(records)
                    .or_else(|| last_request(records))
                    .ok_or_else(|| violation(Rule::Expectation, "race Approve without a gate"))?;
                let req = client::approve(&s, &gate, approved);
                (s, req)
            }
            RaceOp::Expire { .. } => {
                let by = crate::world::EXPIRY_MS as i64 * 1_000_000 + 1_000_000_000;
                self.race[j] = RaceState::Done;
                return self.sim.pass_time(host, by);
            }
            RaceOp::Resume { slot } => (sid(slot), client::resume(&sid(slot))),
            RaceOp::Suspend { slot } => (sid(slot), client::suspend(&sid(slot))),
            RaceOp::Cancel { slot } => (sid(slot), client::cancel(&sid(slot))),
            RaceOp::Delete { slot } => (sid(slot), client::delete(&sid(slot))),
            RaceOp::Exec { slot, text } => (sid(slot), client::exec(&sid(slot), text)),
            RaceOp::Recover { slot } => (sid(slot), client::exec(&sid(slot), "")),
            RaceOp::Fork { slot, .. } => (sid(slot), client::fork(&sid(slot), 0)),
            RaceOp::Forbidden { slot, what, who } => {
                let s = sid(slot);
                let req = forbidden_call(&s, what, &self.sim.d.store.records(&s));
                let id = self.sim.request_as(host, &s, intruder(who), req)?;
                self.race[j] = RaceState::Running(host, id);
                return Ok(());
            }
        };
        let id = self.sim.request(host, &session, req)?;
        self.race[j] = RaceState::Running(host, id);
        Ok(())
    }

    /// A digest of the whole state, for deduplicating interleavings.
    pub fn state_digest(&self) -> u64 {
        use std::hash::Hash;
        let mut h = Fnv::default();
        self.sim.digest_state(&mut h);
        self.client.hash(&mut h);
        self.race.hash(&mut h);
        self.inflight.map(|r| r.0).hash(&mut h);
        h.finish()
    }

    /// Runs the default choice until the run is over, then [`Run::finish`].
    pub fn complete(&mut self) -> Check {
        loop {
            let moves = self.moves()?;
            let Some(&m) = moves.first() else {
                break;
            };
            self.apply(m)?;
        }
        self.finish()
    }

    /// One call on `host`, run FIFO until it replied and the world is quiet.
    fn call(&mut self, host: usize, session: &str, req: Request) -> Result<Call, Violation> {
        let id = self.sim.request(host, session, req)?;
        while !self.sim.items().is_empty() {
            self.steps += 1;
            if self.steps > MAX_STEPS {
                return Err(violation(Rule::Liveness, "runaway in a final call"));
            }
            self.sim.step(0)?;
        }
        let call = self
            .sim
            .call(host, id)
            .cloned()
            .ok_or_else(|| violation(Rule::Liveness, "final call vanished"))?;
        self.sim.forget(host, id);
        if call.reply.is_none() {
            return Err(violation(Rule::Liveness, "a final call never replied"));
        }
        Ok(call)
    }

    /// The sessions of the slots that were not deleted.
    fn sessions(&self) -> Vec<String> {
        let deleted = self.sim.d.store.deleted();
        let mut v: Vec<String> = self
            .client
            .slots
            .iter()
            .filter(|s| !s.is_empty() && !deleted.contains(s))
            .cloned()
            .collect();
        v.sort();
        v.dedup();
        v
    }

    /// After a race: decide what waits and recover what is pending.
    fn settle(&mut self) -> Check {
        let mut refused = std::collections::BTreeSet::new();
        for _ in 0..4 {
            let mut acted = false;
            for sid in self.sessions() {
                let records = self.sim.d.store.records(&sid).to_vec();
                if let Some(gate) = client::awaiting(&records) {
                    self.call(0, &sid, client::approve(&sid, &gate, true))?;
                    acted = true;
                } else if client::pending(&records) && !blocked(&records) && !refused.contains(&sid)
                {
                    let call = self.call(0, &sid, client::resume(&sid))?;
                    if call.reply.as_ref().is_some_and(|r| r.is_err()) {
                        refused.insert(sid);
                    }
                    acted = true;
                }
            }
            if !acted {
                return Ok(());
            }
        }
        Err(violation(
            Rule::Liveness,
            "the race left work that does not settle",
        ))
    }

    /// Settles a race and checks the end state.
    pub fn finish(&mut self) -> Check {
        if !self.scn.race.is_empty() {
            self.settle()?;
            self.check_expiry()?;
        }
        self.sim.restart();
        let view = &self.sim.d.store;
        self.sim.d.oracle.check_journal(view)?;
        crate::oracle::check_no_trace(view, INTRUDER)?;
        for sid in self.sessions() {
            self.check_session(&sid)?;
        }
        for sid in self.sim.d.store.deleted() {
            let get = self.call(
                0,
                &sid,
                Request::GetSession(GetSessionRequest { uid: sid.clone() }),
            )?;
            let reply = get.reply.expect("replied");
            let got = client::brief(&reply);
            if !matches!(&reply, Err(s) if s.code == agentsessions_machine::vocab::Code::NotFound) {
                return Err(violation(
                    Rule::Deleted,
                    format!("{sid}: deleted, but GetSession answers {got}"),
                ));
            }
        }
        self.check_post()
    }

    /// With an expiry raced against a human decision: exactly one decision
    /// is recorded, and the human's reply agrees with it. Told it won, the
    /// decision is the human's; refused as late (FAILED_PRECONDITION), it
    /// is the host's. ABORTED (a conflict with the other host) claims
    /// nothing.
    fn check_expiry(&mut self) -> Check {
        use agentsessions_machine::vocab::{Code, HOST_PRINCIPAL};
        if !self
            .scn
            .race
            .iter()
            .any(|(_, op)| matches!(op, RaceOp::Expire { .. }))
        {
            return Ok(());
        }
        for (slot, reply) in std::mem::take(&mut self.decided) {
            let sid = self.client.slots.get(slot).cloned().unwrap_or_default();
            let decisions: Vec<bool> = self
                .sim
                .d
                .store
                .records(&sid)
                .iter()
                .filter_map(|r| r.event.as_ref())
                .filter(|ev| agentsessions_machine::events::body::approval_result(ev).is_some())
                .map(|ev| {
                    ev.actor
                        .as_ref()
                        .is_some_and(|a| a.principal == HOST_PRINCIPAL)
                })
                .collect();
            let [by_host] = decisions[..] else {
                return Err(violation(
                    Rule::Expectation,
                    format!("{sid}: {} decisions of one request", decisions.len()),
                ));
            };
            match &reply {
                Ok(_) if by_host => {
                    return Err(violation(
                        Rule::Expectation,
                        "a human was told its decision stands, the host's denial is recorded",
                    ));
                }
                Err(s) if s.code == Code::FailedPrecondition && !by_host => {
                    return Err(violation(
                        Rule::Expectation,
                        format!(
                            "a human was refused ({}), yet no expiry is recorded",
                            s.message
                        ),
                    ));
                }
                Ok(_) => self.sim.d.oracle.note("a human decision beat the expiry"),
                Err(s) if s.code == Code::FailedPrecondition => {
                    self.sim.d.oracle.note("the expiry beat a human decision")
                }
                Err(_) => {}
            }
        }
        Ok(())
    }

    fn check_session(&mut self, sid: &str) -> Check {
        let get = self.call(
            0,
            sid,
            Request::GetSession(GetSessionRequest { uid: sid.into() }),
        )?;
        if let Some(Ok(Response::Session(s))) = &get.reply {
            self.sim.d.oracle.check_session(&self.sim.d.store, s)?;
        } else {
            let got = get.reply.as_ref().map_or("none".into(), client::brief);
            return Err(violation(
                Rule::Projection,
                format!("{sid}: GetSession {got}"),
            ));
        }
        self.sim.d.oracle.set_replaying(true);
        let replay = Request::Replay(ReplayRequest {
            session: sid.into(),
            ..ReplayRequest::default()
        });
        let call = self.call(0, sid, replay)?;
        let streamed: Vec<LogRecord> = call
            .items
            .iter()
            .filter_map(|i| match i {
                StreamItem::Record(r) => Some(r.record().clone()),
                _ => None,
            })
            .collect();
        self.sim
            .d
            .oracle
            .check_replay_records(&self.sim.d.store, sid, &streamed)?;
        let harness = Request::ReplayHarness {
            session: sid.into(),
        };
        let call = self.call(0, sid, harness)?;
        self.sim.d.oracle.set_replaying(false);
        let diverges = self.scn.post.iter().any(|p| {
            matches!(p, Post::ReplayDiverges { slot } if self.client.slots.get(*slot).is_some_and(|s| s == sid))
        });
        match (call.reply.expect("replied"), diverges) {
            (Ok(Response::Replayed(report)), false) => {
                self.sim
                    .d
                    .oracle
                    .check_replay_report(&self.sim.d.store, sid, &report)
            }
            (Err(_), true) => Ok(()),
            (other, _) => Err(violation(
                Rule::ReplayMismatch,
                format!(
                    "{sid}: harness replay answered {} (divergence expected: {diverges})",
                    client::brief(&other)
                ),
            )),
        }
    }

    fn check_post(&self) -> Check {
        let uid = |slot: usize| self.client.slots.get(slot).cloned().unwrap_or_default();
        for p in &self.scn.post {
            match *p {
                Post::ToolEffects { slot, n } => {
                    let got = self.sim.d.executor.effects_for(&uid(slot));
                    if got != n {
                        return Err(violation(
                            Rule::Expectation,
                            format!("slot {slot}: {got} tool effects, want {n}"),
                        ));
                    }
                }
                Post::Completed { slot, n } => {
                    let got = completed(&self.sim.d.store.records(&uid(slot)));
                    if got != n {
                        return Err(violation(
                            Rule::Expectation,
                            format!("slot {slot}: {got} completed executions, want {n}"),
                        ));
                    }
                }
                Post::ReplayDiverges { .. } => {}
                Post::Deleted { slot } => {
                    if !self.sim.d.store.deleted().contains(&uid(slot)) {
                        return Err(violation(
                            Rule::Liveness,
                            format!("slot {slot}: the session was not deleted"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Executions with an END record.
fn completed(records: &[LogRecord]) -> usize {
    use agentsessions_proto::v1::EventKind;
    records
        .iter()
        .filter(|r| {
            r.event
                .as_ref()
                .is_some_and(|e| agentsessions_machine::events::kind_of(e) == EventKind::EventEnd)
        })
        .count()
}

/// The last approval request, as a gate reference.
fn last_request(records: &[LogRecord]) -> Option<ApprovalRef> {
    records.iter().rev().find_map(|r| {
        let ev = r.event.as_ref()?;
        let a = agentsessions_machine::events::body::approval(ev)?;
        Some(ApprovalRef {
            execution_id: ev.execution_id.clone(),
            tool_call_id: a.tool_call_id.clone(),
            request_seq: r.seq,
        })
    })
}

/// True when recovery is refused by design: an inherited gate without a
/// receipt.
fn blocked(records: &[LogRecord]) -> bool {
    approval::scan(records, 0)
        .ok()
        .and_then(|s| s.selected().cloned())
        .is_some_and(|g| g.inherited && !g.has_receipt())
}

/// The verified caller of a forbidden call.
fn intruder(who: Who) -> Caller {
    Caller::Verified(Principal {
        name: INTRUDER.to_owned(),
        issuer: "sim".to_owned(),
        grants: who
            .grants()
            .iter()
            .map(|g| g.parse().expect("a grant"))
            .collect(),
        separate_approver: false,
    })
}

/// The request of a forbidden call on session `s`.
fn forbidden_call(s: &str, what: Forbid, records: &[LogRecord]) -> Request {
    match what {
        Forbid::Approve => {
            // The gate pending when it starts, or a made-up one: either way
            // the check comes first.
            let gate = client::awaiting(records).or_else(|| last_request(records));
            match gate {
                Some(g) => client::approve(s, &g, true),
                None => Request::Approve(agentsessions_proto::v1::ApproveRequest {
                    session: s.to_owned(),
                    execution_id: "e".into(),
                    tool_call_id: "c".into(),
                    request_seq: 1,
                    approved: Some(true),
                    ..Default::default()
                }),
            }
        }
        Forbid::Resume => client::resume(s),
        Forbid::Exec => client::exec(s, "intruder"),
        Forbid::Cancel => client::cancel(s),
        Forbid::Delete => client::delete(s),
        Forbid::Fork => client::fork(s, 0),
        Forbid::Suspend => client::suspend(s),
        Forbid::Get => Request::GetSession(GetSessionRequest { uid: s.to_owned() }),
    }
}

/// A forbidden call is PERMISSION_DENIED, whatever else is happening: any
/// other answer means it got past the check or told the caller something.
fn check_refused(what: Forbid, who: Who, reply: &Result<Response, Status>) -> Check {
    match reply {
        Err(s) if s.code == Code::PermissionDenied => Ok(()),
        _ => Err(violation(
            Rule::Authorization,
            format!("{who:?} {what:?}: answered {}", client::brief(reply)),
        )),
    }
}
