//! `Sandbox::builder().perf_map(true)` (`gatehouse bench --perf-map`): every
//! guest function the engine loads is named in `/tmp/perf-<pid>.map`, for
//! `perf report`, whether the module was compiled or taken from the compile
//! cache; and a sandbox that names its functions shares the cache of one
//! that does not.

use std::path::PathBuf;

use gatehouse_core::sandbox::Sandbox;
use gatehouse_tests::guest;

/// The map's lines that name a guest function: `<address> <size> <name>`,
/// the name `wasm[<module>]::function[<index>]` with the function's own name
/// after it when the module kept its name section (the test guests are
/// stripped).
fn function_lines(map: &PathBuf) -> usize {
    let text = std::fs::read_to_string(map).unwrap_or_default();
    text.lines()
        .filter(|line| {
            let mut parts = line.splitn(3, ' ');
            let (Some(address), Some(size), Some(name)) =
                (parts.next(), parts.next(), parts.next())
            else {
                return false;
            };
            address.starts_with("0x")
                && u64::from_str_radix(size, 16).is_ok_and(|size| size > 0)
                && name.starts_with("wasm[")
                && name.contains("]::function[")
        })
        .count()
}

#[test]
fn the_perf_map_names_guest_functions_compiled_or_cached() {
    let map = PathBuf::from(format!("/tmp/perf-{}.map", std::process::id()));
    let cache = tempfile::tempdir().expect("a temporary directory");
    let dir = cache.path().join("compiled");
    let template = guest("reviewer_template");

    // Compiled into the cache by a sandbox without the map: named nowhere.
    let plain = Sandbox::builder()
        .compile_cache(&dir)
        .build()
        .expect("a sandbox");
    assert_eq!(plain.perf_map_path(), None);
    plain
        .load_file(&template, None)
        .expect("the template loads");
    assert_eq!(plain.compile_counts().compiled, 1);
    let before = function_lines(&map);

    // Taken from that cache by a sandbox with the map: named.
    let named = Sandbox::builder()
        .compile_cache(&dir)
        .perf_map(true)
        .build()
        .expect("a sandbox that names its functions");
    assert_eq!(named.perf_map_path(), Some(map.clone()));
    named
        .load_file(&template, None)
        .expect("the template loads");
    assert_eq!(named.compile_counts().hits, 1, "the cache is shared");
    let cached = function_lines(&map);
    assert!(
        cached > before,
        "the cached module's functions are not in {}",
        map.display()
    );

    // Compiled in memory: named too.
    let in_memory = Sandbox::builder()
        .perf_map(true)
        .build()
        .expect("a sandbox that names its functions");
    in_memory
        .load_file(&template, None)
        .expect("the template loads");
    assert!(
        function_lines(&map) > cached,
        "the compiled module's functions are not named"
    );
    let _ = std::fs::remove_file(&map);
}
