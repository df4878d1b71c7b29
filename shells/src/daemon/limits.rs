//! Bounds on what a caller can make the daemon hold, checked before a call
//! reaches a drive loop.
//!
//! Invariant: every admitted call holds one [`Permit`], and the counts it
//! took (its principal's calls and streams, its connection's calls, its
//! request's bytes) are given back exactly once, when the permit drops —
//! with the unary reply or with the last frame of a stream, whichever way
//! the call ends. A refused call holds nothing and touched nothing: the
//! check runs before the drive loop sees the request.
//!
//! The shape checks bound what one request decodes into: a protobuf part
//! or struct value costs a few bytes on the wire and a hundred or more in
//! memory, so a 4 MiB request of empty parts once decoded to ~110 MB and
//! was copied per reader.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use agentsessions_machine::vocab::{Caller, Code, Status};
use agentsessions_proto::v1::{ExecRequest, Part, part};
use pbjson_types::value::Kind;

use crate::metrics::Metrics;

/// What every call counts against the request budget at least: a call's
/// own state (its input in the loop's channel, its sink, its log) costs
/// this much however small its request, so the budget also bounds how
/// many calls can wait at once.
pub const CALL_FLOOR_BYTES: usize = 512;

/// The bounds, each a daemon flag (see docs/security.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most parts in one message (reasoning summaries and tool-result
    /// content included).
    pub max_parts_per_message: usize,
    /// Most messages, parts and struct values in one Exec request.
    pub max_request_elements: usize,
    /// Largest request accepted, as encoded on the wire (gRPC's decode
    /// limit).
    pub max_request_bytes: usize,
    /// Most Exec and Replay streams one verified principal has open.
    pub max_streams_per_principal: usize,
    /// Most calls, unary and streaming, one verified principal has in
    /// flight.
    pub max_calls_per_principal: usize,
    /// Most calls in flight on one client connection.
    pub max_calls_per_connection: usize,
    /// Most request bytes held by calls in flight, across all callers.
    pub request_memory: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_parts_per_message: 1024,
            max_request_elements: 16 * 1024,
            max_request_bytes: 4 * 1024 * 1024,
            max_streams_per_principal: 10,
            max_calls_per_principal: 64,
            max_calls_per_connection: 128,
            request_memory: 24 * 1024 * 1024,
        }
    }
}

pub use crate::metrics::Bound;

/// Checks the shape of an Exec request: parts per message and elements in
/// all. INVALID_ARGUMENT names the first bound broken.
pub fn check_exec(limits: &Limits, req: &ExecRequest) -> Result<(), (Bound, Status)> {
    let mut elements = req.inputs.len();
    for (i, m) in req.inputs.iter().enumerate() {
        let t = Tally::of_parts(&m.parts);
        if t.parts > limits.max_parts_per_message {
            let text = format!(
                "input {i} has {} parts; at most {} per message (--max-parts-per-message)",
                t.parts, limits.max_parts_per_message
            );
            return Err((Bound::PartsPerMessage, Status::invalid_argument(text)));
        }
        elements = elements.saturating_add(t.parts).saturating_add(t.values);
    }
    if elements > limits.max_request_elements {
        let text = format!(
            "the request holds {elements} messages, parts and values; at most {} (--max-request-elements)",
            limits.max_request_elements
        );
        return Err((Bound::RequestElements, Status::invalid_argument(text)));
    }
    Ok(())
}

/// What a message's parts decode into: parts (nested ones included: a
/// reasoning part's summary, a tool result's content) and struct values.
/// Recursion is bounded by prost's decode depth limit (100), which a
/// request had to pass to get here.
#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    parts: usize,
    values: usize,
}

impl Tally {
    fn of_parts(parts: &[Part]) -> Self {
        parts.iter().fold(Self::default(), |t, p| {
            let inner = match &p.part {
                Some(part::Part::Data(d)) => Self::of_struct(d.data.as_ref()),
                Some(part::Part::ToolCall(c)) => Self::of_struct(c.args.as_ref()),
                Some(part::Part::Reasoning(r)) => Self::of_parts(&r.summary),
                Some(part::Part::ToolResult(r)) => {
                    Self::of_parts(&r.content).plus(Self::of_struct(r.output.as_ref()))
                }
                Some(part::Part::Text(_) | part::Part::File(_)) | None => Self::default(),
            };
            t.plus(inner).plus(Self {
                parts: 1,
                values: 0,
            })
        })
    }

    fn of_struct(s: Option<&pbjson_types::Struct>) -> Self {
        let values = s.map_or(0, |s| {
            s.fields
                .values()
                .fold(0usize, |n, v| n.saturating_add(1 + values_below(v)))
        });
        Self { parts: 0, values }
    }

    fn plus(self, o: Self) -> Self {
        Self {
            parts: self.parts.saturating_add(o.parts),
            values: self.values.saturating_add(o.values),
        }
    }
}

/// Values below `v` (not `v` itself).
fn values_below(v: &pbjson_types::Value) -> usize {
    match &v.kind {
        Some(Kind::StructValue(s)) => Tally::of_struct(Some(s)).values,
        Some(Kind::ListValue(l)) => l
            .values
            .iter()
            .fold(0usize, |n, v| n.saturating_add(1 + values_below(v))),
        _ => 0,
    }
}

/// Who a call is counted against.
#[derive(Debug, Clone)]
pub struct Who {
    /// The verified principal; `None` for an open caller (auth off),
    /// bounded per connection only.
    pub principal: Option<String>,
    /// The client connection, when the transport knows it.
    pub conn: Option<SocketAddr>,
}

impl Who {
    /// The caller of a request.
    pub fn of(caller: &Caller, conn: Option<SocketAddr>) -> Self {
        let principal = match caller {
            Caller::Open => None,
            Caller::Verified(p) => Some(p.name.clone()),
        };
        Self { principal, conn }
    }
}

#[derive(Debug, Default)]
struct Counts {
    /// Per principal: (calls, streams).
    principals: HashMap<String, (usize, usize)>,
    connections: HashMap<SocketAddr, usize>,
    bytes: usize,
}

/// Admission for one daemon (shared by its services).
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    counts: Arc<Mutex<Counts>>,
    metrics: Option<Arc<Metrics>>,
}

/// What an admitted call holds; dropping it gives its counts back.
#[must_use = "the call's counts are given back when this drops"]
#[derive(Debug)]
pub struct Permit {
    counts: Arc<Mutex<Counts>>,
    who: Who,
    stream: bool,
    bytes: usize,
    metrics: Option<Arc<Metrics>>,
}

impl Admission {
    /// Admission under `limits`, counting refusals in `metrics`.
    pub fn new(limits: Limits, metrics: Option<Arc<Metrics>>) -> Self {
        assert!(
            limits.request_memory > 0,
            "a zero budget would refuse nothing"
        );
        assert!(limits.max_streams_per_principal > 0 && limits.max_calls_per_connection > 0);
        Self {
            limits,
            counts: Arc::default(),
            metrics,
        }
    }

    /// The bounds in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Counts `bound`'s refusal.
    pub fn refused(&self, bound: Bound) {
        if let Some(m) = &self.metrics {
            m.limit_refused(bound.name().0);
        }
    }

    /// Admits a call of `who` holding `bytes` of request, a stream when
    /// `stream`; RESOURCE_EXHAUSTED names the bound it would pass.
    pub fn admit(&self, who: Who, stream: bool, bytes: usize) -> Result<Permit, Status> {
        let l = &self.limits;
        let mut c = self.counts.lock().expect("admission lock");
        let verdict = (|| {
            if let Some(p) = &who.principal {
                let (calls, streams) = c.principals.get(p).copied().unwrap_or_default();
                if calls >= l.max_calls_per_principal {
                    return Err((Bound::PrincipalCalls, l.max_calls_per_principal));
                }
                if stream && streams >= l.max_streams_per_principal {
                    return Err((Bound::PrincipalStreams, l.max_streams_per_principal));
                }
            }
            let on_conn = who.conn.and_then(|conn| c.connections.get(&conn).copied());
            if on_conn.unwrap_or(0) >= l.max_calls_per_connection {
                return Err((Bound::ConnectionCalls, l.max_calls_per_connection));
            }
            // One call may always run alone, whatever its size (the wire
            // limit already bounds it).
            if c.bytes > 0 && c.bytes.saturating_add(bytes) > l.request_memory {
                return Err((Bound::RequestMemory, l.request_memory));
            }
            Ok(())
        })();
        if let Err((bound, limit)) = verdict {
            drop(c);
            self.refused(bound);
            let (_, flag) = bound.name();
            let text = match bound {
                Bound::RequestMemory => format!(
                    "the daemon holds its limit of {limit} request bytes in flight ({flag}); retry later"
                ),
                Bound::PrincipalStreams => {
                    format!("at most {limit} open streams per principal ({flag})")
                }
                Bound::PrincipalCalls => {
                    format!("at most {limit} calls in flight per principal ({flag})")
                }
                _ => format!("at most {limit} calls in flight per connection ({flag})"),
            };
            return Err(Status::new(Code::ResourceExhausted, text));
        }
        if let Some(p) = &who.principal {
            let entry = c.principals.entry(p.clone()).or_default();
            entry.0 += 1;
            entry.1 += usize::from(stream);
        }
        if let Some(conn) = who.conn {
            *c.connections.entry(conn).or_default() += 1;
        }
        c.bytes += bytes;
        if let Some(m) = &self.metrics {
            m.request_bytes_in_flight(c.bytes);
        }
        Ok(Permit {
            counts: self.counts.clone(),
            who,
            stream,
            bytes,
            metrics: self.metrics.clone(),
        })
    }

    /// Request bytes held by calls in flight (for tests).
    pub fn bytes_in_flight(&self) -> usize {
        self.counts.lock().expect("admission lock").bytes
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        let mut c = self.counts.lock().expect("admission lock");
        if let Some(p) = &self.who.principal {
            let entry = c
                .principals
                .get_mut(p)
                .expect("an admitted principal is counted");
            assert!(entry.0 >= 1 && entry.1 >= usize::from(self.stream));
            entry.0 -= 1;
            entry.1 -= usize::from(self.stream);
            if entry.0 == 0 {
                c.principals.remove(p);
            }
        }
        if let Some(conn) = &self.who.conn {
            let n = c
                .connections
                .get_mut(conn)
                .expect("an admitted connection is counted");
            *n -= 1;
            if *n == 0 {
                c.connections.remove(conn);
            }
        }
        assert!(c.bytes >= self.bytes, "bytes given back were taken");
        c.bytes -= self.bytes;
        if let Some(m) = &self.metrics {
            m.request_bytes_in_flight(c.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentsessions_proto::v1::{DataPart, Message, ReasoningPart, TextPart, ToolResult};

    fn text(s: &str) -> Part {
        Part {
            part: Some(part::Part::Text(TextPart { text: s.into() })),
        }
    }

    fn exec_with(inputs: Vec<Message>) -> ExecRequest {
        ExecRequest {
            inputs,
            ..Default::default()
        }
    }

    fn user(parts: Vec<Part>) -> Message {
        Message {
            role: "user".into(),
            parts,
        }
    }

    fn who(p: &str, port: u16) -> Who {
        Who {
            principal: Some(p.into()),
            conn: Some(SocketAddr::from(([127, 0, 0, 1], port))),
        }
    }

    #[test]
    fn a_message_with_more_parts_than_the_bound_is_invalid() {
        let limits = Limits {
            max_parts_per_message: 3,
            ..Limits::default()
        };
        let ok = exec_with(vec![user(vec![text("a"); 3])]);
        assert!(check_exec(&limits, &ok).is_ok());
        let big = exec_with(vec![user(vec![text("a"); 3]), user(vec![text("a"); 4])]);
        let (bound, status) = check_exec(&limits, &big).unwrap_err();
        assert_eq!(bound, Bound::PartsPerMessage);
        assert_eq!(status.code, Code::InvalidArgument);
        assert!(
            status.message.contains("input 1 has 4 parts"),
            "{}",
            status.message
        );
    }

    #[test]
    fn reasoning_summaries_count_as_parts_of_their_message() {
        let limits = Limits {
            max_parts_per_message: 3,
            ..Limits::default()
        };
        let reasoning = Part {
            part: Some(part::Part::Reasoning(ReasoningPart {
                summary: vec![text("s"); 3],
                ..Default::default()
            })),
        };
        let req = exec_with(vec![user(vec![reasoning])]);
        assert_eq!(
            check_exec(&limits, &req).unwrap_err().0,
            Bound::PartsPerMessage
        );
    }

    #[test]
    fn struct_values_count_toward_the_request_elements() {
        let limits = Limits {
            max_request_elements: 10,
            ..Limits::default()
        };
        let fields = (0..20)
            .map(|i| {
                let v = pbjson_types::Value {
                    kind: Some(Kind::NumberValue(f64::from(i))),
                };
                (format!("k{i}"), v)
            })
            .collect();
        let data = pbjson_types::Struct { fields };
        // Wherever a Struct sits: a data part, a tool result's output.
        for part in [
            part::Part::Data(DataPart {
                data: Some(data.clone()),
            }),
            part::Part::ToolResult(ToolResult {
                output: Some(data.clone()),
                ..Default::default()
            }),
        ] {
            let req = exec_with(vec![user(vec![Part { part: Some(part) }])]);
            let (bound, status) = check_exec(&limits, &req).unwrap_err();
            assert_eq!(bound, Bound::RequestElements);
            assert_eq!(status.code, Code::InvalidArgument);
        }
    }

    #[test]
    fn a_principal_past_its_stream_bound_is_refused_until_a_stream_ends() {
        let admission = Admission::new(
            Limits {
                max_streams_per_principal: 2,
                ..Limits::default()
            },
            None,
        );
        let a = admission.admit(who("r", 1), true, 0).unwrap();
        let _b = admission.admit(who("r", 2), true, 0).unwrap();
        let refused = admission.admit(who("r", 3), true, 0).unwrap_err();
        assert_eq!(refused.code, Code::ResourceExhausted);
        assert!(refused.message.contains("--max-streams-per-principal"));
        // Unary calls and other principals are not streams of this one.
        let _unary = admission.admit(who("r", 3), false, 0).unwrap();
        let _other = admission.admit(who("s", 3), true, 0).unwrap();
        drop(a);
        let _c = admission.admit(who("r", 3), true, 0).unwrap();
    }

    #[test]
    fn a_connection_past_its_call_bound_is_refused_whoever_calls() {
        let admission = Admission::new(
            Limits {
                max_calls_per_connection: 1,
                ..Limits::default()
            },
            None,
        );
        let open = |port| Who {
            principal: None,
            conn: Some(SocketAddr::from(([127, 0, 0, 1], port))),
        };
        let held = admission.admit(open(9), false, 0).unwrap();
        assert_eq!(
            admission.admit(open(9), false, 0).unwrap_err().code,
            Code::ResourceExhausted
        );
        let _elsewhere = admission.admit(open(10), false, 0).unwrap();
        drop(held);
        let _again = admission.admit(open(9), false, 0).unwrap();
    }

    #[test]
    fn request_bytes_past_the_budget_are_refused_and_given_back_on_drop() {
        let admission = Admission::new(
            Limits {
                request_memory: 100,
                ..Limits::default()
            },
            None,
        );
        // Alone, a call larger than the budget still runs.
        let big = admission.admit(who("w", 1), true, 150).unwrap();
        assert_eq!(
            admission.admit(who("x", 2), false, 1).unwrap_err().code,
            Code::ResourceExhausted
        );
        drop(big);
        assert_eq!(admission.bytes_in_flight(), 0);
        let a = admission.admit(who("w", 1), false, 60).unwrap();
        assert!(admission.admit(who("w", 1), false, 60).is_err());
        let _b = admission.admit(who("w", 1), false, 40).unwrap();
        assert_eq!(admission.bytes_in_flight(), 100);
        drop(a);
        assert_eq!(admission.bytes_in_flight(), 40);
    }
}
