//! Generates the gRPC stubs, the proto3-JSON serde impls and the descriptor set
//! (for server reflection) from `proto/vfps/api/v1`.

use std::{env, path::PathBuf};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A vendored protoc keeps the build free of system packages.
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let include = protoc_bin_vendored::include_path()?;
    // SAFETY of set_var: build scripts are single-threaded.
    #[allow(unsafe_code)]
    unsafe {
        env::set_var("PROTOC", protoc);
    }

    // The manifest directory of this build, not of the one that compiled the
    // script (`env!`): a target/ copied from another checkout would otherwise
    // keep generating that checkout's protos.
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    let files: Vec<PathBuf> = ["meta", "namespaces", "pseudonyms", "jobs"]
        .iter()
        .map(|f| root.join(format!("vfps/api/v1/{f}.proto")))
        .collect();
    let out = PathBuf::from(env::var("OUT_DIR")?);
    let descriptor = out.join("vfps_descriptor.bin");

    tonic_prost_build::configure()
        .codec_path("crate::codec::ProtoCodec")
        .file_descriptor_set_path(&descriptor)
        .compile_well_known_types(true)
        .extern_path(".google.protobuf", "::pbjson_types")
        .compile_protos(&files, &[root.clone(), include])?;

    let set = std::fs::read(&descriptor)?;
    // JSON as upstream's transcoding writes and reads it (ASP.NET Core, default
    // GrpcJsonSettings). Unknown fields are skipped, so a newer client's extra
    // field does not fail its call (a wrong type still does). Fields at their
    // default value are written (`"description": ""`, `"pseudonyms": []`);
    // fields with presence (`optional`, messages) only when set.
    // Written by hand instead: Meta (src/meta.rs), whose timestamps end in `Z`
    // where pbjson_types writes `+00:00`, and PseudonymServiceListResponse
    // (src/list_response.rs), whose int64 is a number where pbjson writes a
    // string. A new int64 field needs the same.
    pbjson_build::Builder::new()
        .register_descriptors(&set)?
        .ignore_unknown_fields()
        .emit_fields()
        .exclude([
            ".vfps.api.v1.Meta",
            ".vfps.api.v1.PseudonymServiceListResponse",
        ])
        .build(&[".vfps.api.v1"])?;

    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    Ok(())
}
