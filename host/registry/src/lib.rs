//! Reviewer modules as artifacts. An organization publishes its modules to
//! an OCI registry; a gatehouse pulls them, verifies them, and runs exactly
//! what its lock file names. This crate holds what that needs and knows no
//! MCP and no gateway: for now the local store ([`store`]) where pulled
//! blobs live by their digest ([`digest`]), so that a gateway starts from
//! what it pulled before without a network.
#![deny(missing_docs)]

pub mod digest;
pub mod store;

pub use digest::{Digest, DigestError};
pub use store::{GcReport, Store, StoreError};
