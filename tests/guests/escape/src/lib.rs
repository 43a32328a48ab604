//! Test guest `escape`: tries to reach outside the sandbox and declines with
//! a report of what succeeded, e.g. `file=false dir=false env=0 args=0 net=false
//! clock=true`. A closed sandbox gives files, directories, environment,
//! arguments and sockets nothing.
#![cfg(target_arch = "wasm32")]

use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};

struct Guest;

impl Reviewer for Guest {
    const NAME: &'static str = "escape";

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

test_guest_helper::export_reviewer!(Guest);
