//! The operator's endpoint (`/metrics`, `/healthz`, `/readyz`) of the two
//! processes that serve one: an instance's own (`gatehouse serve
//! --metrics ADDR`), and the totals of every instance on a config, served by
//! its console process at `[telemetry] listen`.

use std::sync::Arc;

use anyhow::Context;
use gatehouse_gateway::router::Router;
use gatehouse_telemetry::endpoint::{Endpoint, EndpointConfig, FnSource, Source};
use gatehouse_telemetry::health::{Check, Readiness};
use gatehouse_telemetry::series::Snapshot;
use tokio_util::sync::CancellationToken;

/// Binds `config` for `source` and serves it until `stop` is cancelled;
/// prints where on stdout when `announce`.
pub async fn serve(
    config: &EndpointConfig,
    source: Arc<dyn Source>,
    stop: CancellationToken,
) -> anyhow::Result<std::net::SocketAddr> {
    let endpoint = Endpoint::bind(config, source).await?;
    let address = endpoint
        .local_addr()
        .context("the telemetry endpoint has no address")?;
    tokio::spawn(endpoint.serve(async move { stop.cancelled().await }));
    tracing::info!(%address, "telemetry on http://{address}/metrics");
    Ok(address)
}

/// An instance's own numbers and readiness.
pub fn instance_source(
    router: Arc<Router>,
    metrics: gatehouse_console::link::MetricsSource,
    status: gatehouse_console::link::StatusSource,
    audit: Arc<gatehouse_audit::AuditLog>,
    required: Vec<String>,
) -> Arc<dyn Source> {
    Arc::new(FnSource {
        snapshot: move || metrics(),
        readiness: move || {
            gatehouse_gateway::telemetry::readiness(
                &status(),
                router.swapped_at().is_some(),
                audit.health(),
                &required,
            )
        },
    })
}

/// The totals of every instance attached to the console `hub`.
pub fn totals_source(hub: Arc<gatehouse_console::hub::Hub>) -> Arc<dyn Source> {
    let ready = hub.clone();
    Arc::new(FnSource {
        snapshot: move || -> Snapshot { hub.totals() },
        readiness: move || {
            Readiness::new(vec![Check::new(
                "console",
                true,
                format!("{} instances attached", ready.instance_count()),
            )])
        },
    })
}
