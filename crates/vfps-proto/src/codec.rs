//! The protobuf codec of every generated client and server: tonic's prost codec
//! with small first buffers.
//!
//! tonic starts each call's request and response buffers at 8 KiB. Past the
//! allocator's per-thread cache, every such allocation and free went through
//! glibc's shared bins (a profile of 64-client Creates put `malloc_consolidate`
//! and `unlink_chunk` under them). This service's messages are a few hundred
//! bytes; a buffer grows when a larger one (a List page) is encoded or
//! received.
//!
//! A request that does not decode (invalid UTF-8 in a string, a truncated
//! message, a field of the wrong wire type) is the caller's bad input:
//! `INVALID_ARGUMENT`, where tonic says `INTERNAL`. A response that does not
//! decode stays `INTERNAL` (the server's fault).

use std::marker::PhantomData;

use prost::Message;
use tonic::{
    codec::{BufferSettings, Codec, DecodeBuf, Decoder},
    Code, Status,
};
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
    U: Message + Default + Wire + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProtoDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProtoDecoder(ProstDecoder::new(settings()))
    }
}

/// Which way a message travels, so its decode failure gets the right code.
pub trait Wire {
    /// The code of a message of this type that does not decode.
    const UNDECODABLE: Code;
}

macro_rules! wire {
    ($code:ident: $($message:ident),+ $(,)?) => {
        $(impl Wire for crate::v1::$message {
            const UNDECODABLE: Code = Code::$code;
        })+
    };
}

wire!(InvalidArgument:
    NamespaceServiceCreateRequest,
    NamespaceServiceGetRequest,
    NamespaceServiceGetAllRequest,
    NamespaceServiceDeleteRequest,
    PseudonymServiceCreateRequest,
    PseudonymServiceGetRequest,
    PseudonymServiceListRequest,
    PseudonymServiceEraseRequest,
    CsvJobServiceCreateRequest,
    CsvJobServiceStartRequest,
    CsvJobServiceGetRequest,
    CsvJobServiceListRequest,
    CsvJobServiceCancelRequest,
    CsvJobServiceDeleteRequest,
    CsvJobServiceClearFinishedRequest,
    CsvJobServiceGetDownloadAddressRequest,
);
wire!(Internal:
    NamespaceServiceCreateResponse,
    NamespaceServiceGetResponse,
    NamespaceServiceGetAllResponse,
    NamespaceServiceDeleteResponse,
    PseudonymServiceCreateResponse,
    PseudonymServiceGetResponse,
    PseudonymServiceListResponse,
    PseudonymServiceEraseResponse,
    CsvJobServiceCreateResponse,
    CsvJobServiceStartResponse,
    CsvJobServiceGetResponse,
    CsvJobServiceListResponse,
    CsvJobServiceCancelResponse,
    CsvJobServiceDeleteResponse,
    CsvJobServiceClearFinishedResponse,
    CsvJobServiceGetDownloadAddressResponse,
);

/// tonic's prost decoder, with [`Wire::UNDECODABLE`] as the code of a message
/// that does not decode.
#[derive(Debug)]
pub struct ProtoDecoder<U>(ProstDecoder<U>);

impl<U: Message + Default + Wire> Decoder for ProtoDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.0
            .decode(buf)
            .map_err(|s| Status::new(U::UNDECODABLE, s.message().to_owned()))
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.0.buffer_settings()
    }
}
