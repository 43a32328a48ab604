//! WASI calls that wait end at the review's deadline.
//!
//! Epoch interruption stops a guest only while its wasm code runs. A guest
//! that waits inside the host (`std::thread::sleep` is a monotonic-clock
//! pollable passed to `wasi:io/poll`) would sit there past its deadline,
//! holding its thread, its pool slot and the router's review permit. In the
//! closed WASI context the only host calls that can wait are the two that
//! wait on pollables: `poll` and `pollable.block` (stdin is closed, stdout a
//! sink, stderr a memory pipe, and there are no files or sockets, so every
//! stream is ready at once; `tests/hostile_guests.rs` proves each). This
//! module redefines those two, and the six blocking stream calls as well, as
//! the same WASI implementation raced against the time the review has left: past it, the call traps with
//! [`Trap::Interrupt`], which the review reports as the `deadline` failure,
//! exactly as if the guest had been computing.

use std::time::Duration;

use wasmtime::component::{Linker, Resource, ResourceTable};
use wasmtime::{StoreContextMut, Trap};
use wasmtime_wasi_io::bindings::wasi::io::poll::{Host as _, HostPollable as _};
use wasmtime_wasi_io::bindings::wasi::io::streams::{
    Host as _, HostInputStream as _, HostOutputStream as _, StreamError as WasiStreamError,
};
use wasmtime_wasi_io::poll::DynPollable;
use wasmtime_wasi_io::streams::{DynInputStream, DynOutputStream, StreamResult};

use super::state::ReviewState;

/// Redefines `wasi:io/poll`'s waiting functions in `linker` (which must hold
/// the closed WASI, its interfaces defined at `wasi_version`) so that they
/// return or trap by the review's deadline.
pub(crate) fn bound_waiting_calls(
    linker: &mut Linker<ReviewState>,
    wasi_version: &str,
) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut poll = linker.instance(&format!("wasi:io/poll@{wasi_version}"))?;
    poll.func_wrap(
        "poll",
        |mut store: StoreContextMut<'_, ReviewState>,
         (pollables,): (Vec<Resource<DynPollable>>,)| {
            let left = store.data().deadline.remaining();
            let table = store.data_mut().table();
            until(left, table.poll(pollables)).map(|ready| (ready,))
        },
    )?;
    poll.func_wrap(
        "[method]pollable.block",
        |mut store: StoreContextMut<'_, ReviewState>, (pollable,): (Resource<DynPollable>,)| {
            let left = store.data().deadline.remaining();
            let table = store.data_mut().table();
            until(left, table.block(pollable))
        },
    )?;
    bound_stream_calls(linker, wasi_version)?;
    linker.allow_shadowing(false);
    Ok(())
}

/// Redefines `wasi:io/streams`' six blocking calls the same way. In the
/// closed context none of them can wait (stdin is closed, stdout a sink,
/// stderr a memory pipe, no files or sockets), so this changes nothing
/// today; it keeps a later change to the guest's stdio from reopening an
/// unbounded wait. A stream error is handed to the guest as WASI does.
fn bound_stream_calls(
    linker: &mut Linker<ReviewState>,
    wasi_version: &str,
) -> wasmtime::Result<()> {
    let mut streams = linker.instance(&format!("wasi:io/streams@{wasi_version}"))?;
    streams.func_wrap(
        "[method]input-stream.blocking-read",
        |mut store: StoreContextMut<'_, ReviewState>,
         (stream, len): (Resource<DynInputStream>, u64)| {
            let left = store.data().deadline.remaining();
            let table = store.data_mut().table();
            let read = until(left, async { Ok(table.blocking_read(stream, len).await) })?;
            as_wasi(table, read)
        },
    )?;
    streams.func_wrap(
        "[method]input-stream.blocking-skip",
        |mut store: StoreContextMut<'_, ReviewState>,
         (stream, len): (Resource<DynInputStream>, u64)| {
            let left = store.data().deadline.remaining();
            let table = store.data_mut().table();
            let skipped = until(left, async { Ok(table.blocking_skip(stream, len).await) })?;
            as_wasi(table, skipped)
        },
    )?;
    streams.func_wrap(
        "[method]output-stream.blocking-write-and-flush",
        |mut store: StoreContextMut<'_, ReviewState>,
         (stream, bytes): (Resource<DynOutputStream>, Vec<u8>)| {
            let left = store.data().deadline.remaining();
            let table = store.data_mut().table();
            let written = until(left, async {
                Ok(table.blocking_write_and_flush(stream, bytes).await)
            })?;
            as_wasi(table, written)
        },
    )?;
    streams.func_wrap(
        "[method]output-stream.blocking-write-zeroes-and-flush",
        |mut store: StoreContextMut<'_, ReviewState>,
         (stream, len): (Resource<DynOutputStream>, u64)| {
            let left = store.data().deadline.remaining();
            let table = store.data_mut().table();
            let written = until(left, async {
                Ok(table.blocking_write_zeroes_and_flush(stream, len).await)
            })?;
            as_wasi(table, written)
        },
    )?;
    streams.func_wrap(
        "[method]output-stream.blocking-flush",
        |mut store: StoreContextMut<'_, ReviewState>, (stream,): (Resource<DynOutputStream>,)| {
            let left = store.data().deadline.remaining();
            let table = store.data_mut().table();
            let flushed = until(left, async { Ok(table.blocking_flush(stream).await) })?;
            as_wasi(table, flushed)
        },
    )?;
    streams.func_wrap(
        "[method]output-stream.blocking-splice",
        |mut store: StoreContextMut<'_, ReviewState>,
         (stream, source, len): (Resource<DynOutputStream>, Resource<DynInputStream>, u64)| {
            let left = store.data().deadline.remaining();
            let table = store.data_mut().table();
            let spliced = until(left, async {
                Ok(table.blocking_splice(stream, source, len).await)
            })?;
            as_wasi(table, spliced)
        },
    )?;
    Ok(())
}

/// A stream call's result as WASI hands it to the guest: the value, the
/// `stream-error` variant, or a trap.
fn as_wasi<T>(
    table: &mut ResourceTable,
    result: StreamResult<T>,
) -> wasmtime::Result<(Result<T, WasiStreamError>,)> {
    match result {
        Ok(value) => Ok((Ok(value),)),
        Err(error) => Ok((Err(table.convert_stream_error(error)?),)),
    }
}

/// Runs `call` (a WASI host function) on the runtime WASI uses, for at most
/// `left`. A call that is ready at once returns its result even with no time
/// left, so a guest polling ready streams behaves as before.
fn until<T>(
    left: Duration,
    call: impl Future<Output = wasmtime::Result<T>>,
) -> wasmtime::Result<T> {
    wasmtime_wasi::runtime::in_tokio(async move {
        match tokio::time::timeout(left, call).await {
            Ok(result) => result,
            Err(_) => Err(wasmtime::Error::new(Trap::Interrupt)),
        }
    })
}
