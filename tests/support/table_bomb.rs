//! A component that grows its table without end, built at test time.
//!
//! Rust guests never emit `table.grow`, so this one is written as a core
//! module in text, against the exact export signatures the `reviewer` world
//! asks for (computed from `wit/` with wit-parser), then wrapped into a
//! component with wit-component. `review` grows a funcref table 1,000
//! elements at a time and traps when a growth is refused, as a guest's
//! allocator would.

use wit_component::{ComponentEncoder, StringEncoding, embed_component_metadata};
use wit_parser::abi::{AbiVariant, WasmType};
use wit_parser::{LiftLowerAbi, ManglingAndAbi, Resolve, WasmExport, WasmExportKind, WorldItem};

fn wasm_type(ty: &WasmType) -> &'static str {
    match ty {
        WasmType::I64 => "i64",
        WasmType::F32 => "f32",
        WasmType::F64 => "f64",
        _ => "i32",
    }
}

/// The component's bytes.
pub fn table_bomb_component() -> Vec<u8> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve
        .push_dir(crate::workspace_root().join("wit"))
        .expect("wit/ parses");
    let world = resolve
        .select_world(&[package], Some("reviewer"))
        .expect("the reviewer world");
    let mangling = ManglingAndAbi::Legacy(LiftLowerAbi::Sync);
    let mut wat = String::from(
        "(module\n  (table $grown 0 funcref)\n  (global $bump (mut i32) (i32.const 8))\n",
    );
    for (key, item) in &resolve.worlds[world].exports {
        let WorldItem::Interface { id, .. } = item else {
            continue;
        };
        for (name, func) in &resolve.interfaces[*id].functions {
            let signature = resolve.wasm_signature(AbiVariant::GuestExport, func);
            let export = resolve.wasm_export_name(
                mangling,
                WasmExport::Func {
                    interface: Some(key),
                    func,
                    kind: WasmExportKind::Normal,
                },
            );
            let params: Vec<&str> = signature.params.iter().map(wasm_type).collect();
            let results: Vec<&str> = signature.results.iter().map(wasm_type).collect();
            let body = if name == "review" {
                "(loop $more\n      (if (i32.eq (table.grow $grown (ref.null func) (i32.const 1000)) (i32.const -1))\n        (then unreachable))\n      (br $more))\n    unreachable"
            } else {
                "unreachable"
            };
            wat.push_str(&format!(
                "  (func (export {export:?}) (param {}) (result {})\n    {body})\n",
                params.join(" "),
                results.join(" ")
            ));
        }
    }
    let memory = resolve.wasm_export_name(mangling, WasmExport::Memory);
    let realloc = resolve.wasm_export_name(mangling, WasmExport::Realloc);
    // A bump allocator: the host writes the request through it.
    wat.push_str(&format!(
        "  (memory (export {memory:?}) 1)\n  (func (export {realloc:?}) (param i32 i32 i32 i32) (result i32) (local $ptr i32)\n    (local.set $ptr (i32.and (i32.add (global.get $bump) (i32.sub (local.get 2) (i32.const 1))) (i32.xor (i32.sub (local.get 2) (i32.const 1)) (i32.const -1))))\n    (global.set $bump (i32.add (local.get $ptr) (local.get 3)))\n    (block $done (loop $grow\n      (br_if $done (i32.le_u (global.get $bump) (i32.mul (memory.size) (i32.const 65536))))\n      (if (i32.eq (memory.grow (i32.const 1)) (i32.const -1)) (then unreachable))\n      (br $grow)))\n    (local.get $ptr))\n)\n"
    ));
    let mut module = wat::parse_str(&wat).unwrap_or_else(|error| panic!("{error}\n{wat}"));
    embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)
        .expect("embed the world");
    ComponentEncoder::default()
        .module(&module)
        .expect("a core module for the world")
        .validate(true)
        .encode()
        .expect("a component")
}
