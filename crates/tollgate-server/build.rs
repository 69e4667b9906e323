//! Compiles `proto/` (the `RateLimitConfig` message tollgate takes over
//! xDS, docs/xds.md) into Rust. The parser is `protox`, pure Rust, so a
//! build needs no `protoc` on the machine; `google.protobuf` types are
//! envoy-types' (the ADS messages carry them too), so one `Struct` type
//! flows from the wire to the loader.

fn main() {
    let proto = "proto/ratelimit/config/ratelimit/v3/rls_conf.proto";
    println!("cargo:rerun-if-changed={proto}");
    let files = match protox::compile([proto], ["proto"]) {
        Ok(files) => files,
        Err(e) => panic!("{proto}: {e}"),
    };
    let mut config = prost_build::Config::new();
    // Not prost-types' (the default): envoy-types', named below.
    config.compile_well_known_types();
    config.extern_path(".google.protobuf", "::envoy_types::pb::google::protobuf");
    if let Err(e) = config.compile_fds(files) {
        panic!("{proto}: {e}");
    }
}
