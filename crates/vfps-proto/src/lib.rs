//! The `vfps.api.v1` wire contract, generated from `proto/vfps/api/v1/*.proto`.
//!
//! Messages derive `serde` with the proto3 JSON mapping as upstream's gRPC JSON
//! transcoding (ASP.NET Core, default `GrpcJsonSettings`) writes it, so the REST
//! routes answer what upstream's do: camelCase names, fields at their default
//! value written (`""`, `0`, `[]`) and fields with presence only when set, enums
//! by name, 64-bit integers as numbers, RFC 3339 timestamps in UTC with `Z`.
//! Read: enums by name or number, 64-bit integers as numbers or strings.

#![allow(clippy::all, clippy::unwrap_used, missing_docs)]

pub mod codec;
mod list_response;
mod meta;

pub mod v1 {
    tonic::include_proto!("vfps.api.v1");
    include!(concat!(env!("OUT_DIR"), "/vfps.api.v1.serde.rs"));
}

/// The encoded `FileDescriptorSet` of the contract, for server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/vfps_descriptor.bin"));

pub use pbjson_types::Timestamp;
