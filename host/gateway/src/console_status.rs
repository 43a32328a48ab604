//! What a `gatehouse serve` instance reports to the approvals console about
//! itself ([`gatehouse_console::status`]): the chain in force, when it was
//! swapped in, and the state of each backend.

use std::collections::BTreeMap;
use std::time::UNIX_EPOCH;

use gatehouse_console::status::{BackendStatus, InstanceStatus, KitStatus, ModuleStatus};
use gatehouse_mcp::runtime::Snapshot;

use crate::config::Config;
use crate::router::Router;

/// The instance's status: `config` is the version being served, `snapshot`
/// the MCP runtime's view.
pub fn instance_status(config: &Config, router: &Router, snapshot: &Snapshot) -> InstanceStatus {
    // One read: the modules, the kit and the time all of one swap.
    let in_force = router.in_force();
    let chain = &in_force.chain;
    let module = |link: &gatehouse_core::chain::ChainLink, mode: &str| ModuleStatus {
        name: link.module.name().to_owned(),
        digest: link.module.digest().to_owned(),
        signer: link.module.signer().map(str::to_owned),
        mode: mode.to_owned(),
    };
    let modules = chain
        .links()
        .iter()
        .map(|link| module(link, "live"))
        .chain(chain.shadow().iter().map(|link| module(link, "shadow")))
        .collect();
    let mut backends: BTreeMap<String, BackendStatus> = config
        .mcp_servers
        .keys()
        .map(|name| {
            let status = BackendStatus {
                name: name.clone(),
                state: "starting".to_owned(),
                detail: None,
            };
            (name.clone(), status)
        })
        .collect();
    for (name, error) in snapshot.failures() {
        backends.insert(
            name.clone(),
            BackendStatus {
                name: name.clone(),
                state: "failed".to_owned(),
                detail: Some(error.clone()),
            },
        );
    }
    // Each server's tools, counted in one pass over the catalog.
    let mut tools_of: BTreeMap<&str, usize> = BTreeMap::new();
    for tool in snapshot.tools() {
        *tools_of.entry(tool.server.as_str()).or_default() += 1;
    }
    for name in snapshot.connections().keys() {
        let tools = tools_of.get(name.as_str()).copied().unwrap_or(0);
        backends.insert(
            name.clone(),
            BackendStatus {
                name: name.clone(),
                state: "connected".to_owned(),
                detail: Some(format!("{tools} tools")),
            },
        );
    }
    InstanceStatus {
        config: config.origin.display().to_string(),
        modules,
        kit: if !config.review.verify_contract {
            KitStatus::Off
        } else if in_force.loaded {
            KitStatus::Passed
        } else {
            KitStatus::Pending
        },
        swapped_at_ms: in_force
            .swapped_at
            .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
            .and_then(|since| u64::try_from(since.as_millis()).ok()),
        backends: backends.into_values().collect(),
        in_flight: router.in_flight() as u64,
    }
}
