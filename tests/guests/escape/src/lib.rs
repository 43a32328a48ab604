//! Test guest `escape`: tries to reach outside the sandbox and declines with
//! a report of what succeeded, e.g. `file=false dir=false env=0 args=0 net=false
//! clock=true`. A closed sandbox gives files, directories, environment,
//! arguments and sockets nothing.
#![cfg(target_arch = "wasm32")]

wit_bindgen::generate!({
    world: "reviewer",
    path: "../../../wit",
});

use gatehouse::reviewer::types::{Decision, ModuleInfo, Outcome, ReviewRequest};

struct Guest;

impl exports::gatehouse::reviewer::review::Guest for Guest {
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: "escape".to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

    fn review(_config: String, _request: ReviewRequest) -> Outcome {
        let file = std::fs::read("/etc/passwd").is_ok() || std::fs::read("Cargo.toml").is_ok();
        let dir = std::fs::read_dir("/").is_ok() || std::fs::read_dir(".").is_ok();
        let env = std::env::vars().count();
        let args = std::env::args().count();
        let net = std::net::TcpStream::connect(("127.0.0.1", 80)).is_ok()
            || std::net::UdpSocket::bind(("0.0.0.0", 0)).is_ok();
        let clock = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .is_ok();
        Outcome {
            decision: Decision::Decline(Some(format!(
                "file={file} dir={dir} env={env} args={args} net={net} clock={clock}"
            ))),
            rationale: None,
            risk: None,
        }
    }
}

export!(Guest);
