//! Compiles the vendored Envoy protos (`proto/`) with `protox`, so that no
//! system `protoc` is needed, into the `pb` module's servers and clients (the rate limit service's,
//! the quota service's and the xDS client's).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/envoy/service/ratelimit/v3/rls.proto",
        "proto/envoy/service/rate_limit_quota/v3/rlqs.proto",
        "proto/envoy/service/discovery/v3/ads.proto",
        "proto/ratelimit/config/ratelimit/v3/rls_conf.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
