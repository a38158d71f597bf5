// Generates the Rust types and gRPC stubs of the .proto files with a
// vendored protoc (no system protoc needed), plus the descriptor set that
// server reflection serves.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "nqueens/v1/plan.proto",
        "nqueens/v1/coordinator.proto",
        "nqueens/v1/journal.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        // Prost's codec, with the fields of each message counted before
        // it is decoded (src/codec.rs).
        .codec_path("crate::codec::BoundedCodec")
        .file_descriptor_set_path(out.join("nqueens_descriptor.bin"))
        .compile_with_config(config, &protos, &["."])?;
    Ok(())
}
