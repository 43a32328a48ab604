//! Loading a module for a swap: compiled from scratch (cold) versus from the
//! on-disk compile cache (a restart, or swapping back).
//!
//! Run: `.ci/build-guests && cargo bench -p gatehouse-bench --bench swap`

use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use gatehouse_core::sandbox::{Limits, Sandbox};

fn guardian() -> Vec<u8> {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"),
        PathBuf::from,
    );
    let path = target.join("wasm32-wasip2/guest/gatehouse_guardian.wasm");
    std::fs::read(&path)
        .unwrap_or_else(|error| panic!("{}: {error} (run .ci/build-guests first)", path.display()))
}

fn bench(c: &mut Criterion) {
    let bytes = guardian();
    let mut group = c.benchmark_group("load the guardian for a swap");
    group.sample_size(20);
    let cold = Sandbox::new(Limits::default()).expect("sandbox");
    group.bench_function("cold (compile)", |b| {
        b.iter(|| cold.load_bytes("g", "g.wasm", &bytes, None).expect("load"))
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let cached = Sandbox::builder()
        .compile_cache(dir.path())
        .build()
        .expect("sandbox");
    cached
        .load_bytes("g", "g.wasm", &bytes, None)
        .expect("warm the cache");
    group.bench_function("from the compile cache", |b| {
        b.iter(|| {
            cached
                .load_bytes("g", "g.wasm", &bytes, None)
                .expect("load")
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
