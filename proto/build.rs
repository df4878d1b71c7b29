//! Compiles `proto/*.proto` without a system protoc: protox parses the files
//! in pure Rust, prost generates the messages, pbjson the proto3-JSON serde
//! impls, and (feature `grpc`) madsim-tonic-build the real and simulated
//! service stubs.

use std::path::PathBuf;

const FILES: [&str; 5] = [
    "proto/common.proto",
    "proto/session.proto",
    "proto/harness.proto",
    "proto/harness_registry.proto",
    "proto/tools.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    for file in FILES {
        println!("cargo:rerun-if-changed={file}");
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?);

    let mut compiler = protox::Compiler::new(["proto"])?;
    compiler.include_imports(true).include_source_info(true);
    compiler.open_files(FILES.map(|f| f.trim_start_matches("proto/")))?;
    let fds = compiler.file_descriptor_set();
    let fds_bytes = compiler.encode_file_descriptor_set();
    let fds_path = out.join("agentsessions.fds.bin");
    std::fs::write(&fds_path, &fds_bytes)?;

    // pbjson_types supplies Struct/Value and friends with proto3-JSON impls.
    // Timestamp is ours: pbjson_types writes "+00:00" where the hash chain
    // (and Go's protojson) needs "Z".
    let mut config = prost_build::Config::new();
    config
        .compile_well_known_types()
        .extern_path(".google.protobuf", "::pbjson_types")
        .extern_path(".google.protobuf.Timestamp", "crate::wkt::Timestamp")
        .btree_map(["."]);
    config.compile_fds(fds)?;

    pbjson_build::Builder::new()
        .register_descriptors(&fds_bytes)?
        .preserve_proto_field_names()
        .btree_map(["."])
        .extern_path(".google.protobuf", "::pbjson_types")
        .extern_path(".google.protobuf.Timestamp", "crate::wkt::Timestamp")
        .build(&[".agentsessions.v1"])?;

    if std::env::var_os("CARGO_FEATURE_GRPC").is_some() {
        build_services(&fds_path)?;
    }
    Ok(())
}

#[cfg(feature = "grpc")]
fn build_services(fds_path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    // Every message type is extern, so this emits only the service modules.
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("grpc");
    std::fs::create_dir_all(out.join("sim"))?;
    madsim_tonic_build::configure()
        .out_dir(&out)
        .file_descriptor_set_path(fds_path)
        .skip_protoc_run()
        // Harness has an rpc named Connect, which would clash with the
        // generated `connect(endpoint)` constructor; clients use `new(channel)`.
        .build_transport(false)
        .compile_well_known_types(true)
        .extern_path(".google.protobuf", "::pbjson_types")
        .extern_path(".google.protobuf.Timestamp", "crate::wkt::Timestamp")
        .extern_path(".agentsessions.v1", "crate::v1")
        .compile_protos(&FILES, &["proto"])?;
    server_codec(&out.join("agentsessions.v1.rs"))
}

/// Points every generated server at `crate::codec::ServerCodec`, so a
/// request that does not decode is INVALID_ARGUMENT (see `src/codec.rs`).
/// madsim-tonic-build has no codec option; the tonic output names
/// `tonic_prost::ProstCodec` once per method, and the madsim (`sim/`)
/// stubs pass messages without decoding them. Clients are left alone.
#[cfg(feature = "grpc")]
fn server_codec(path: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    const TONIC: &str = "tonic_prost::ProstCodec::default()";
    const OURS: &str = "crate::codec::ServerCodec::default()";
    let text = std::fs::read_to_string(path)?;
    let mut out = String::with_capacity(text.len());
    let mut replaced = 0;
    // Top-level modules start at column 0: `pub mod x_client {`, `pub mod x_server {`.
    for (i, module) in text.split("\npub mod ").enumerate() {
        if i > 0 {
            out.push_str("\npub mod ");
        }
        let name = module.split_whitespace().next().unwrap_or_default();
        if i > 0 && name.ends_with("_server") {
            replaced += module.matches(TONIC).count();
            out.push_str(&module.replace(TONIC, OURS));
        } else {
            out.push_str(module);
        }
    }
    if replaced == 0 {
        return Err(format!("{}: no server codec to replace", path.display()).into());
    }
    std::fs::write(path, out)?;
    Ok(())
}

#[cfg(not(feature = "grpc"))]
fn build_services(_: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    Ok(())
}
