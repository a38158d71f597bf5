// Generates the Rust types of the .proto files with a vendored protoc.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let protos = ["nqueens/v1/plan.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    prost_build::Config::new()
        .protoc_executable(protoc)
        .compile_protos(&protos, &["."])?;
    Ok(())
}
