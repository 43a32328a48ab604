//! Stopping a long-running command on SIGINT or SIGTERM.

/// SIGINT or SIGTERM, listened for from the start of a long-running command
/// (`serve`, `console`): one that arrives at any moment after (between two
/// waits, say) is never lost.
#[derive(Clone)]
pub(super) struct Stop(tokio::sync::watch::Receiver<bool>);

impl Stop {
    /// Starts listening. Call inside the runtime, first thing.
    pub(super) fn listen() -> anyhow::Result<Stop> {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            // Registered here, before the task runs, so nothing slips by.
            let mut interrupt = signal(SignalKind::interrupt())?;
            let mut terminate = signal(SignalKind::terminate())?;
            tokio::spawn(async move {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
                tracing::info!("shutting down");
                let _ = stop.send(true);
            });
        }
        #[cfg(not(unix))]
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            tracing::info!("shutting down");
            let _ = stop.send(true);
        });
        Ok(Stop(stopped))
    }

    /// Whether a signal came.
    pub(super) fn requested(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves when a signal came (at once if one already did).
    pub(super) async fn requested_now(mut self) {
        if self.0.wait_for(|stopped| *stopped).await.is_err() {
            // The listener is gone: no signal will ever come.
            std::future::pending::<()>().await;
        }
    }
}
