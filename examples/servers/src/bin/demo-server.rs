//! `demo-server`: an MCP server for gatehouse's tests and demo.
//!
//! Run `demo-server --help` for the flags; the logic lives in the library
//! (`gatehouse_example_servers`).

fn main() -> std::process::ExitCode {
    gatehouse_example_servers::cli_main(std::env::args().skip(1))
}
