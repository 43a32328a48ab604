//! Test guest `wrong-world`: exports a world other than `gatehouse:reviewer/reviewer`.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "other",
    path: "wit",
});

struct Other;

impl Guest for Other {
    fn run() -> u32 {
        7
    }
}

export!(Other);
