//! Reviewer modules as artifacts. An organization publishes its modules to
//! an OCI registry; a gatehouse pulls them, verifies them, and runs exactly
//! what its lock file names. This crate holds what that needs and knows no
//! MCP and no gateway:
//!
//! - [`reference`](mod@reference): `HOST[:PORT]/REPO[:TAG][@sha256:…]`, the host always
//!   written out;
//! - [`layout`]: the Wasm component artifact (`wkg`'s and `oras`'s layout),
//!   and the check every pulled manifest passes;
//! - [`access`]: TLS, plain HTTP only for loopback or a listed host,
//!   credentials (environment, Docker config), bounds and retries;
//! - [`remote`]: push and pull ([`Registry`]);
//! - [`config`]: the `[registry]` section of `gatehouse.toml`;
//! - [`lock`]: `gatehouse.lock`, the digests a gateway runs;
//! - [`signature`]: cosign's key-based signatures, made and verified;
//! - [`trust`]: the `[trust]` policy, which keys must have signed what;
//! - [`store`]: the local content-addressed store where pulled blobs live
//!   by their [`digest`], so a gateway starts from what it pulled before
//!   without a network.
#![deny(missing_docs)]

pub mod access;
pub mod config;
pub mod digest;
pub mod layout;
pub mod lock;
pub mod reference;
pub mod remote;
pub mod signature;
pub mod store;
pub mod trust;

pub use access::{Access, AccessBuilder, AccessError};
pub use digest::{Digest, DigestError};
pub use layout::LayoutError;
pub use reference::{ModuleRef, RefError};
pub use remote::{Pulled, Pushed, Registry, RegistryError};
pub use store::{GcReport, Store, StoreError};
