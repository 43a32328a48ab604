//! A thread that advances the engine's epoch at a fixed interval, which is
//! what interrupts a review past its deadline.

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::Engine;

/// Stops and joins the thread when dropped.
pub(crate) struct EpochTicker {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub(crate) fn start(engine: Engine, tick: Duration) -> std::io::Result<EpochTicker> {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("gatehouse-epoch".to_owned())
            .spawn(move || {
                loop {
                    match stopped.recv_timeout(tick) {
                        Err(RecvTimeoutError::Timeout) => engine.increment_epoch(),
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })?;
        Ok(EpochTicker {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
