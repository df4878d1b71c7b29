//! The codec of every generated server: prost, except that a request that
//! does not decode is the caller's fault.
//!
//! Invariant: a request the server cannot decode (malformed wire bytes, or
//! messages nested past prost's recursion limit, such as a deeply nested
//! `google.protobuf.Struct` in a DataPart) is refused with
//! INVALID_ARGUMENT, never INTERNAL: INTERNAL would page an operator for
//! what any caller can send. Clients keep tonic's own codec, so a reply
//! that does not decode stays INTERNAL there.

use tonic::Status;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic_prost::{ProstCodec, ProstDecoder, ProstEncoder};

/// [`ProstCodec`] with request decode errors mapped to INVALID_ARGUMENT.
#[derive(Debug, Clone, Default)]
pub struct ServerCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Codec for ServerCodec<T, U>
where
    T: prost::Message + Send + 'static,
    U: prost::Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = RequestDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder(self.0.decoder())
    }
}

/// Decodes requests; see the module docs.
#[derive(Debug)]
pub struct RequestDecoder<U>(ProstDecoder<U>);

impl<U: prost::Message + Default> Decoder for RequestDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        // ProstDecoder's only error is a prost DecodeError, which tonic
        // reports as INTERNAL. Its text is `failed to decode …: ` then one
        // `Type.field: ` per enclosing message (up to 100 of them), then
        // what went wrong; only the last part is kept.
        self.0.decode(buf).map_err(|s| {
            if s.code() != tonic::Code::Internal {
                return s;
            }
            let what = s.message().rsplit(": ").next().unwrap_or_default();
            if what == "recursion limit reached" {
                Status::invalid_argument("request nests messages deeper than 100 levels")
            } else {
                Status::invalid_argument(format!("request does not decode: {what}"))
            }
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
