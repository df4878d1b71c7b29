//! Identifiers and time: the keys that tie an outcome to its effect, a
//! reply to its call and a harness event to its connection.
//!
//! Ids the machine mints come from an [`IdSource`] passed in, never from
//! randomness inside the machine, so a seeded source makes every run
//! repeatable.

/// Identifies one effect awaiting an outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EffectId(pub u64);

/// Identifies one client call; chosen by the shell, unique while in flight.
/// The top half of the space is the host's own (see [`RequestId::HOST`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RequestId(pub u64);

impl RequestId {
    /// Set on the ids of calls the host makes itself (an expiry's denial
    /// and resume): their replies stay inside the machine. A shell's ids
    /// never have it.
    pub const HOST: u64 = 1 << 63;

    /// True for a call the host makes itself.
    pub fn is_host(self) -> bool {
        self.0 & Self::HOST != 0
    }
}

/// Identifies one harness connection (one `Harness.Connect` stream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConnId(pub u64);

/// Unix time in nanoseconds; the only clock the machine knows.
pub type Nanos = i64;

/// Unix nanos as a Timestamp; `None` for 0 (unset).
pub fn timestamp(nanos: Nanos) -> Option<agentsessions_proto::wkt::Timestamp> {
    let ts = (nanos != 0).then(|| {
        agentsessions_proto::wkt::Timestamp::new(
            nanos.div_euclid(1_000_000_000),
            nanos.rem_euclid(1_000_000_000) as i32,
        )
    });
    debug_assert!(
        ts.as_ref()
            .is_none_or(|t| (0..1_000_000_000).contains(&t.nanos)),
        "a normalized timestamp"
    );
    ts
}

/// A Timestamp as Unix nanos; `None` where it does not fit or is not
/// after the epoch (the inverse of [`timestamp`]).
pub fn nanos_of(ts: &agentsessions_proto::wkt::Timestamp) -> Option<Nanos> {
    let nanos = i128::from(ts.seconds) * 1_000_000_000 + i128::from(ts.nanos);
    let nanos = Nanos::try_from(nanos).ok().filter(|n| *n > 0)?;
    debug_assert_eq!(
        timestamp(nanos).as_ref(),
        Some(ts),
        "a normalized timestamp"
    );
    Some(nanos)
}

/// Where ids come from. The daemon uses OS randomness; tests and the
/// simulator use a seeded or counting source, which keeps the machine
/// deterministic.
pub trait IdSource {
    /// `sess-` + 24 lowercase hex.
    fn session_uid(&mut self) -> String;
    /// 16 lowercase hex (8 random bytes).
    fn execution_id(&mut self) -> String;
    /// 16 lowercase hex; the recorded MODEL_CALL id.
    fn model_call_id(&mut self) -> String;
    /// `harness-` + 24 lowercase hex.
    fn harness_uid(&mut self) -> String;
}

/// A deterministic [`IdSource`] that counts; the ids keep the real formats.
#[derive(Debug, Clone, Default)]
pub struct CountingIds {
    next: u64,
}

impl CountingIds {
    /// Starts counting at `start` (use different starts for different hosts).
    pub fn starting_at(start: u64) -> Self {
        Self { next: start }
    }
    fn bump(&mut self) -> u64 {
        self.next = self.next.wrapping_add(1);
        assert_ne!(self.next, 0, "ids are never zero: the counter wrapped");
        self.next
    }
}

impl IdSource for CountingIds {
    fn session_uid(&mut self) -> String {
        let uid = format!("sess-{:024x}", self.bump());
        debug_assert_eq!(uid.len(), 5 + 24, "sess- and 24 hex digits");
        uid
    }
    fn execution_id(&mut self) -> String {
        let id = format!("{:016x}", self.bump());
        debug_assert_eq!(id.len(), 16, "a u64 is 16 hex digits");
        id
    }
    fn model_call_id(&mut self) -> String {
        let id = format!("{:016x}", self.bump());
        debug_assert_eq!(id.len(), 16, "a u64 is 16 hex digits");
        id
    }
    fn harness_uid(&mut self) -> String {
        let uid = format!("harness-{:024x}", self.bump());
        debug_assert_eq!(uid.len(), 8 + 24, "harness- and 24 hex digits");
        uid
    }
}
