//! The MCP side: server configuration, connections to servers, the tool
//! catalog under qualified names, and the runtime that keeps them current.

pub mod config;
pub mod connection;
pub mod naming;
pub mod refresh;
pub mod runtime;
pub mod source;
