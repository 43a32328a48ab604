//! A [`Model`] for tests: it follows a script, keeps the requests it saw,
//! and, like a real provider, ends a wait at the deadline or on cancel.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gatehouse_core::model::{Cancel, Completion, CompletionRequest, Model, ModelError, ModelReply};

/// What the scripted model does on each call.
#[derive(Clone, Copy)]
pub enum Script {
    /// Answers `text` at once.
    Answer(&'static str),
    /// Sleeps, then answers `text`.
    AfterSleep(Duration, &'static str),
    /// Waits for the deadline or the cancel token, as a real provider must.
    Hang,
    /// Waits for the cancel token only, ignoring the deadline: a provider
    /// that misbehaves, for the watchdog.
    UntilCancelled,
}

/// A [`Model`] that follows a script and keeps the requests it saw.
pub struct Scripted {
    script: Script,
    /// The requests it was asked, in order.
    pub seen: Mutex<Vec<CompletionRequest>>,
    /// Set when an [`Script::UntilCancelled`] wait saw its cancel token.
    pub saw_cancel: std::sync::atomic::AtomicBool,
}

impl Scripted {
    /// A model that follows `script` on every call.
    pub fn new(script: Script) -> Arc<Scripted> {
        Arc::new(Scripted {
            script,
            seen: Mutex::new(Vec::new()),
            saw_cancel: std::sync::atomic::AtomicBool::new(false),
        })
    }
}

impl Model for Scripted {
    fn complete(
        &self,
        request: &CompletionRequest,
        deadline: Instant,
        cancel: &Cancel,
    ) -> ModelReply {
        self.seen.lock().expect("lock").push(request.clone());
        match self.script {
            Script::Answer(text) => ModelReply::answered(Completion::text("scripted-1", text)),
            Script::AfterSleep(pause, text) => {
                std::thread::sleep(pause);
                ModelReply::answered(Completion::text("scripted-1", text))
            }
            Script::UntilCancelled => loop {
                if cancel.is_cancelled() {
                    self.saw_cancel
                        .store(true, std::sync::atomic::Ordering::SeqCst);
                    return ModelReply::failed(ModelError::Cancelled, 1);
                }
                std::thread::sleep(Duration::from_millis(5));
            },
            Script::Hang => loop {
                if cancel.is_cancelled() {
                    return ModelReply::failed(ModelError::Cancelled, 1);
                }
                if Instant::now() >= deadline {
                    return ModelReply::failed(ModelError::Timeout, 1);
                }
                std::thread::sleep(Duration::from_millis(5));
            },
        }
    }
}
