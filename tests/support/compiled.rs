//! What a compile cache directory holds, as the tests of its bound read it.
//! Shared by the `gatehouse-tests` library and, by `#[path]`, the
//! `gatehouse` binary's gathered tests (`host/cli/tests/all`).

use std::path::Path;

/// The sha256 of every module compiled into the cache directory `dir`, from
/// its artifacts' names (`<module sha256>-<engine>.cwasm`), sorted; the
/// packs of compiled functions are left out.
pub fn cached_digests(dir: &Path) -> Vec<String> {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("the compile cache {}: {error}", dir.display()));
    let mut digests: Vec<String> = entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name();
            let name = name.to_str()?.strip_suffix(".cwasm")?.to_owned();
            Some(name.split_once('-')?.0.to_owned())
        })
        .collect();
    digests.sort();
    digests
}

/// The sha256 of a module's bytes, as the cache names its artifact.
pub fn module_digest(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(bytes))
}
