//! The protobuf codec of every generated client and server: tonic's prost codec
//! with small first buffers.
//!
//! tonic starts each call's request and response buffers at 8 KiB. Past the
//! allocator's per-thread cache, every such allocation and free went through
//! glibc's shared bins (a profile of 64-client Creates put `malloc_consolidate`
//! and `unlink_chunk` under them). This service's messages are a few hundred
//! bytes; a buffer grows when a larger one (a List page) is encoded or
//! received.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstDecoder, ProstEncoder};

/// A call's first buffer, each way: above every single-item message, within
/// the allocator's per-thread cache.
pub const BUFFER_BYTES: usize = 1024;

/// How much a streamed response buffers before it yields (tonic's default).
const YIELD_THRESHOLD: usize = 32 * 1024;

fn settings() -> BufferSettings {
    BufferSettings::new(BUFFER_BYTES, YIELD_THRESHOLD)
}

/// `application/grpc+proto` via prost, with [`BUFFER_BYTES`] first buffers.
#[derive(Debug, Clone)]
pub struct ProtoCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for ProtoCodec<T, U> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<T, U> Codec for ProtoCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(settings())
    }
}
