//! Compiles the vendored Envoy protos (`proto/`) with `protox`, so that no
//! system `protoc` is needed, into the `pb` module's server and client.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/envoy/service/ratelimit/v3/rls.proto"];
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
