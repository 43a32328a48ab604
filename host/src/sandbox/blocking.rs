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
//! module redefines those two as the same WASI implementation raced against
//! the time the review has left: past it, the call traps with
//! [`Trap::Interrupt`], which the review reports as the `deadline` failure,
//! exactly as if the guest had been computing.

use std::time::Duration;

use wasmtime::component::{Linker, Resource};
use wasmtime::{StoreContextMut, Trap};
use wasmtime_wasi_io::bindings::wasi::io::poll::{Host as _, HostPollable as _};
use wasmtime_wasi_io::poll::DynPollable;

use super::state::ReviewState;
use super::wasi::HOST_WASI_VERSION;

/// Redefines `wasi:io/poll`'s waiting functions in `linker` (which must hold
/// the closed WASI) so that they return or trap by the review's deadline.
pub(crate) fn bound_waiting_calls(linker: &mut Linker<ReviewState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut poll = linker.instance(&format!("wasi:io/poll@{HOST_WASI_VERSION}"))?;
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
    linker.allow_shadowing(false);
    Ok(())
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
