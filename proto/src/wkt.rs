//! Well-known types that need a representation of our own.
//!
//! `google.protobuf.Timestamp` must serialize in proto3-JSON exactly as Go's
//! protojson does (`Z` suffix, 0/3/6/9 fraction digits) because it is part of
//! the hashed canonical form. pbjson-types' version writes `+00:00`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::de::Error as _;
use serde::ser::Error as _;

/// Seconds of 0001-01-01T00:00:00Z, the smallest valid proto Timestamp.
pub const MIN_SECONDS: i64 = -62_135_596_800;
/// Seconds of 9999-12-31T23:59:59Z, the largest valid proto Timestamp.
pub const MAX_SECONDS: i64 = 253_402_300_799;

/// A point in time, wire-compatible with `google.protobuf.Timestamp`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// Why a timestamp has no proto3-JSON form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampError {
    /// Seconds outside years 0001..=9999.
    SecondsOutOfRange,
    /// Nanos outside 0..1e9.
    NanosOutOfRange,
}

impl std::fmt::Display for TimestampError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::SecondsOutOfRange => "timestamp seconds outside 0001..9999",
            Self::NanosOutOfRange => "timestamp nanos outside 0..1e9",
        })
    }
}

impl std::error::Error for TimestampError {}

impl Timestamp {
    /// Builds a timestamp from Unix seconds and nanoseconds (not validated).
    pub const fn new(seconds: i64, nanos: i32) -> Self {
        Self { seconds, nanos }
    }

    /// Checks the proto3 range rules.
    pub fn validate(&self) -> Result<(), TimestampError> {
        if !(MIN_SECONDS..=MAX_SECONDS).contains(&self.seconds) {
            return Err(TimestampError::SecondsOutOfRange);
        }
        if !(0..1_000_000_000).contains(&self.nanos) {
            return Err(TimestampError::NanosOutOfRange);
        }
        Ok(())
    }

    /// RFC 3339 in UTC with a `Z` suffix and 0, 3, 6 or 9 fraction digits,
    /// the form protojson writes.
    pub fn to_rfc3339(&self) -> Result<String, TimestampError> {
        self.validate()?;
        let dt = DateTime::<Utc>::from_timestamp(self.seconds, self.nanos as u32)
            .ok_or(TimestampError::SecondsOutOfRange)?;
        Ok(dt.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    }

    /// Parses RFC 3339 (any offset) into a UTC timestamp.
    pub fn parse_rfc3339(s: &str) -> Option<Self> {
        let dt = DateTime::parse_from_rfc3339(s).ok()?;
        let ts = Self::new(dt.timestamp(), dt.timestamp_subsec_nanos() as i32);
        ts.validate().ok().map(|()| ts)
    }
}

impl From<pbjson_types::Timestamp> for Timestamp {
    fn from(t: pbjson_types::Timestamp) -> Self {
        Self::new(t.seconds, t.nanos)
    }
}

impl From<Timestamp> for pbjson_types::Timestamp {
    fn from(t: Timestamp) -> Self {
        Self {
            seconds: t.seconds,
            nanos: t.nanos,
        }
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339().map_err(S::Error::custom)?)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse_rfc3339(&s).ok_or_else(|| D::Error::custom("invalid RFC 3339 timestamp"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_like_protojson_with_z_and_si_fraction_digits() {
        let cases = [
            (1_700_000_000, 0, "2023-11-14T22:13:20Z"),
            (1_700_000_000, 500_000_000, "2023-11-14T22:13:20.500Z"),
            (1_700_000_000, 1_000, "2023-11-14T22:13:20.000001Z"),
            (1_700_000_000, 1, "2023-11-14T22:13:20.000000001Z"),
            (-1, 999_999_999, "1969-12-31T23:59:59.999999999Z"),
            (MIN_SECONDS, 0, "0001-01-01T00:00:00Z"),
        ];
        for (s, n, want) in cases {
            assert_eq!(Timestamp::new(s, n).to_rfc3339().unwrap(), want);
            assert_eq!(Timestamp::parse_rfc3339(want), Some(Timestamp::new(s, n)));
        }
    }

    #[test]
    fn out_of_range_timestamps_are_errors_not_panics() {
        assert_eq!(
            Timestamp::new(MAX_SECONDS + 1, 0).to_rfc3339(),
            Err(TimestampError::SecondsOutOfRange)
        );
        assert_eq!(
            Timestamp::new(0, -1).to_rfc3339(),
            Err(TimestampError::NanosOutOfRange)
        );
        assert_eq!(
            Timestamp::new(0, 1_000_000_000).to_rfc3339(),
            Err(TimestampError::NanosOutOfRange)
        );
        assert!(serde_json::to_string(&Timestamp::new(i64::MAX, 0)).is_err());
    }
}
