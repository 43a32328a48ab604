//! What `tracing` writes, captured in memory, for the tests that check what
//! the code logs. The subscriber is a plain `tracing_subscriber::fmt`: no
//! colours and none of its own ANSI sanitising, so what a test finds escaped
//! was escaped by the code that logged it, not by the formatter (the binary's
//! escaping formatter is not involved either).
//!
//! One file, included with `#[path]` by each test that needs it: the
//! integration tests in `host/cli/tests/all/` and the unit tests of
//! the library crates (core, mcp, gateway, models: through their `lib.rs`, `#[cfg(test)]`
//! only), so no library carries test support of its own.

#![allow(dead_code)]

use std::sync::{Arc, Mutex, PoisonError};

/// The bytes written, shared by every writer made from it.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Everything written so far, as text; panics (failing the test) if it
    /// is not UTF-8, which a log must be.
    pub fn text(&self) -> String {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        String::from_utf8(bytes).expect("the log is UTF-8")
    }
}

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;

    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

/// A plain subscriber writing events at `level` and above into `captured`.
pub fn subscriber(
    captured: &Captured,
    level: tracing::Level,
) -> impl tracing::Subscriber + Send + Sync + 'static {
    tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(level)
        .with_ansi(false)
        .with_ansi_sanitization(false)
        .finish()
}

/// Runs `run` with [`subscriber`] as this thread's default and returns its
/// result and what was logged at `level` and above meanwhile.
pub fn logged<T>(level: tracing::Level, run: impl FnOnce() -> T) -> (T, String) {
    let captured = Captured::default();
    let value = tracing::subscriber::with_default(subscriber(&captured, level), run);
    (value, captured.text())
}
