//! An [`Outbound`] encoded straight onto the wire: a Start's history is
//! written from the shared journal records it references, never copied
//! into an owned frame first. A remote harness is thus streamed its
//! history from the drive loop's record cache, as an in-process one reads
//! it there.
//!
//! Invariant: the bytes are exactly prost's encoding of
//! [`Outbound::into_wire`] (same fields, in field-number order), so no peer
//! can tell the two apart; the tests compare them byte for byte.

use agentsessions_proto::v1::controller_frame::Frame;
use prost::Message as _;
use prost::bytes::BufMut;
use prost::encoding::{self, WireType};

use super::Outbound;

/// `ControllerFrame.start`.
const FRAME_START: u32 = 3;
/// `Start.config`, the one field numbered before the history.
const START_CONFIG: u32 = 1;
/// `Start.history`.
const START_HISTORY: u32 = 2;

impl Outbound {
    /// Writes the frame [`Outbound::into_wire`] would build, without
    /// building it. Fails only when `buf` cannot grow to hold the frame.
    pub fn encode_wire(self, buf: &mut impl BufMut) -> Result<(), prost::EncodeError> {
        let Outbound { mut frame, history } = self;
        let (mut start, history) = match (frame.frame.take(), history) {
            (Some(Frame::Start(start)), Some(history)) => (start, history),
            (other, history) => {
                frame.frame = other;
                return Outbound { frame, history }.into_wire().encode(buf);
            }
        };
        debug_assert!(start.history.is_empty(), "a Start carries one history");
        // What is left of the Start after these two are taken encodes as
        // its fields numbered after the history, in prost's order.
        let config = std::mem::take(&mut start.config);
        let config_len = if config.is_empty() {
            0
        } else {
            encoding::bytes::encoded_len(START_CONFIG, &config)
        };
        let history_len: usize = history
            .iter()
            .map(|event| encoding::message::encoded_len(START_HISTORY, event))
            .sum();
        let start_len = config_len + history_len + start.encoded_len();
        let envelope_len = frame.encoded_len();
        let total = envelope_len
            + encoding::key_len(FRAME_START)
            + encoding::encoded_len_varint(start_len as u64)
            + start_len;
        if buf.remaining_mut() < total {
            // prost's own refusal (it checks before writing); this path
            // may copy, it sends nothing.
            start.config = config;
            frame.frame = Some(Frame::Start(start));
            return Outbound {
                frame,
                history: Some(history),
            }
            .into_wire()
            .encode(buf);
        }
        frame.encode(buf)?;
        encoding::encode_key(FRAME_START, WireType::LengthDelimited, buf);
        encoding::encode_varint(start_len as u64, buf);
        if !config.is_empty() {
            encoding::bytes::encode(START_CONFIG, &config, buf);
        }
        for event in history.iter() {
            encoding::message::encode(START_HISTORY, event, buf);
        }
        start.encode(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::History;
    use agentsessions_machine::events;
    use agentsessions_proto::v1::{
        ApprovalRef, ControllerFrame, Event, EventKind, IdentityContext, ModelResult, Start,
        event::Body,
    };

    fn event(i: usize) -> Event {
        Event {
            execution_id: format!("x{i}"),
            kind: EventKind::EventOutput as i32,
            body: Some(Body::Message(events::text_message(
                "assistant",
                &format!("reply {i}"),
            ))),
            ..Event::default()
        }
    }

    fn history(n: usize) -> History {
        History::from_events((0..n).map(event))
    }

    fn start(config: &[u8], inputs: usize, resume_from_seq: i64) -> ControllerFrame {
        ControllerFrame {
            session: "s1".into(),
            execution_id: "x9".into(),
            frame: Some(Frame::Start(Start {
                config: config.to_vec(),
                history: Vec::new(),
                inputs: (0..inputs)
                    .map(|i| events::text_message("user", &format!("input {i}")))
                    .collect(),
                identity: Some(IdentityContext {
                    can_mint_tokens: true,
                    ..IdentityContext::default()
                }),
                resume_from_seq,
            })),
        }
    }

    fn direct(outbound: Outbound) -> Vec<u8> {
        let mut buf = Vec::new();
        outbound.encode_wire(&mut buf).unwrap();
        buf
    }

    fn copied(outbound: Outbound) -> Vec<u8> {
        outbound.into_wire().encode_to_vec()
    }

    #[test]
    fn a_start_with_shared_history_encodes_as_the_copied_frame_byte_for_byte() {
        for (config, inputs, resume, n) in [
            (&b""[..], 0, 0, 0),
            (&b""[..], 1, 0, 1),
            (&b"{\"k\":1}"[..], 2, 7, 3),
            (&b"x"[..], 1, 0, 300),
        ] {
            let outbound = Outbound {
                frame: start(config, inputs, resume),
                history: Some(history(n)),
            };
            let bytes = direct(outbound.clone());
            assert_eq!(bytes, copied(outbound.clone()), "{n} events");
            // And it reads back as the frame with its history inside.
            let read = ControllerFrame::decode(&bytes[..]).unwrap();
            assert_eq!(read, outbound.into_wire());
        }
    }

    #[test]
    fn frames_without_shared_history_encode_as_prost_does() {
        let frames = [
            start(b"cfg", 1, 0),
            ControllerFrame {
                session: "s1".into(),
                execution_id: "x1".into(),
                frame: Some(Frame::Model(ModelResult {
                    model_call_id: "m1".into(),
                    ..ModelResult::default()
                })),
            },
            ControllerFrame {
                frame: Some(Frame::Park(ApprovalRef::default())),
                ..ControllerFrame::default()
            },
            ControllerFrame::default(),
        ];
        for frame in frames {
            let expected = frame.encode_to_vec();
            assert_eq!(direct(Outbound::from(frame.clone())), expected);
            // A history beside a frame that is not a Start is not sent.
            let beside = Outbound {
                frame,
                history: Some(history(2)),
            };
            if !matches!(beside.frame.frame, Some(Frame::Start(_))) {
                assert_eq!(direct(beside), expected);
            }
        }
    }

    #[test]
    fn a_buffer_too_small_is_refused_before_anything_is_written() {
        let outbound = Outbound {
            frame: start(b"cfg", 1, 0),
            history: Some(history(4)),
        };
        let mut small = [0u8; 16];
        let mut buf = &mut small[..];
        assert!(outbound.encode_wire(&mut buf).is_err());
        assert_eq!(small, [0u8; 16]);
    }
}
