//! The codec of every generated service and client: prost's, with one
//! check before a message is decoded. A protobuf message of many tiny
//! fields costs far more decoded than on the wire: two bytes make an empty
//! element of a repeated field, a struct of a hundred bytes or more. A
//! 4 MiB `ReportMany` of two million empty reports would take hundreds of
//! megabytes to decode before any bound on its reports is checked. A
//! message whose top-level fields are more than [`MOST_FIELDS`] and
//! [`BYTES_PER_FIELD`] bytes each on average is refused unread
//! (RESOURCE_EXHAUSTED). The largest real messages are far within it: a
//! heartbeat names at most 4,096 leases, a report at most 1,024 results,
//! and a listed job or worker takes more bytes than that.

use prost::Message;
use std::marker::PhantomData;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::{ProstCodec, ProstEncoder};

/// Top-level fields a message may have whatever its size.
pub const MOST_FIELDS: usize = 8192;

/// Beyond [`MOST_FIELDS`], one more field for each of these bytes.
pub const BYTES_PER_FIELD: usize = 64;

/// Prost's codec, with the count of fields checked before decoding.
#[derive(Debug, Clone)]
pub struct BoundedCodec<T, U> {
    _pd: PhantomData<(T, U)>,
}

impl<T, U> Default for BoundedCodec<T, U> {
    fn default() -> Self {
        Self { _pd: PhantomData }
    }
}

impl<T, U> Codec for BoundedCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = BoundedDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::default().encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        BoundedDecoder { _pd: PhantomData }
    }
}

/// Decodes a `U` once its fields are counted.
#[derive(Debug, Clone)]
pub struct BoundedDecoder<U> {
    _pd: PhantomData<U>,
}

impl<U: Message + Default + Send + 'static> Decoder for BoundedDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        use prost::bytes::Buf;
        // A message is one contiguous buffer; were it not, the part seen
        // is counted and prost's decoding still bounds the rest.
        fields_within(buf.chunk()).map_err(|e| Status::resource_exhausted(e.to_string()))?;
        ProstCodec::<(), U>::raw_decoder(BufferSettings::default()).decode(buf)
    }
}

/// A message with too many fields for its size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "a message of {bytes} bytes with more than {most} fields is refused unread (at most \
     {MOST_FIELDS}, and one more for each {BYTES_PER_FIELD} bytes)"
)]
pub struct TooManyFields {
    pub bytes: usize,
    pub most: usize,
}

/// Counts the top-level fields of the encoded message `bytes`, up to the
/// bound for its size. A malformed message is left to prost's decoding,
/// which refuses it.
pub fn fields_within(bytes: &[u8]) -> Result<(), TooManyFields> {
    let most = MOST_FIELDS + bytes.len() / BYTES_PER_FIELD;
    let mut rest = bytes;
    let mut fields = 0;
    while !rest.is_empty() {
        fields += 1;
        if fields > most {
            return Err(TooManyFields {
                bytes: bytes.len(),
                most,
            });
        }
        let Some(after) = skip_field(rest) else {
            return Ok(());
        };
        rest = after;
    }
    Ok(())
}

/// What follows the field at the start of `b`, or `None` if it is
/// malformed.
fn skip_field(b: &[u8]) -> Option<&[u8]> {
    let (key, b) = varint(b)?;
    match key & 7 {
        0 => Some(varint(b)?.1),
        1 => b.get(8..),
        2 => {
            let (len, b) = varint(b)?;
            b.get(usize::try_from(len).ok()?..)
        }
        5 => b.get(4..),
        // Groups (3, 4) are not in this schema: prost refuses them.
        _ => None,
    }
}

/// A varint at the start of `b`, and what follows it.
fn varint(b: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, &byte) in b.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &b[i + 1..]));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::v1;

    fn encoded(m: &impl Message) -> Vec<u8> {
        m.encode_to_vec()
    }

    /// The largest real messages pass; two million empty reports in 4 MiB
    /// do not, nor do as many varints; a message of few fields passes
    /// whatever its size.
    #[test]
    fn many_tiny_fields_are_refused_and_real_messages_pass() {
        let lease = v1::LeaseRef {
            job_id: u64::MAX,
            task_index: u64::MAX,
            lease_id: u64::MAX,
        };
        let beat = v1::HeartbeatRequest {
            worker_id: "w".repeat(64),
            leases: vec![lease; 4096],
            ..Default::default()
        };
        assert_eq!(fields_within(&encoded(&beat)), Ok(()));
        let reports = v1::ReportManyRequest {
            worker_id: "w".into(),
            reports: vec![v1::ReportItem::default(); 1024],
        };
        assert_eq!(fields_within(&encoded(&reports)), Ok(()));

        let bomb = b"\x12\x00".repeat(2 << 20);
        let refused = fields_within(&bomb).unwrap_err();
        assert_eq!(refused.most, MOST_FIELDS + (4 << 20) / BYTES_PER_FIELD);
        // Fields of two bytes: 8,456 of them may have 8,192 + 16,912 / 64.
        let fits = |fields: usize| fields_within(&b"\x08\x01".repeat(fields)).is_ok();
        assert!(fits(8456) && !fits(8457));
        let big = v1::ReportManyRequest {
            worker_id: "w".repeat(4 << 20),
            reports: Vec::new(),
        };
        assert_eq!(fields_within(&encoded(&big)), Ok(()));
    }

    /// Malformed input is left to prost: no panic, no refusal here.
    #[test]
    fn malformed_messages_are_left_to_prost() {
        for bad in [
            &b"\x80"[..],
            b"\x12\xff\xff\xff\xff\x0f",
            b"\x0b",
            b"\x09\x01",
        ] {
            assert_eq!(fields_within(bad), Ok(()));
            assert!(v1::ReportManyRequest::decode(bad).is_err());
        }
    }
}
