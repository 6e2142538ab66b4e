//! The `vfps.api.v1` wire contract, generated from `proto/vfps/api/v1/*.proto`.
//!
//! Messages derive `serde` with the proto3 JSON mapping (camelCase names, enums by
//! name or number, 64-bit integers as strings, RFC 3339 timestamps), so the REST
//! routes speak exactly what gRPC JSON transcoding would.

#![allow(clippy::all, clippy::unwrap_used, missing_docs)]

pub mod codec;
mod meta;

pub mod v1 {
    tonic::include_proto!("vfps.api.v1");
    include!(concat!(env!("OUT_DIR"), "/vfps.api.v1.serde.rs"));
}

/// The encoded `FileDescriptorSet` of the contract, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/vfps_descriptor.bin"));

pub use pbjson_types::Timestamp;
