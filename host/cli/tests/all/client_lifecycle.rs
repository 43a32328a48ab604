//! `gatehouse serve` as an MCP client really starts and ends it: stdin and
//! stdout a socketpair (Claude Code, any libuv or Bun client), a pipe, a
//! pseudo-terminal or a file; ended by a signal, by the client closing
//! stdin, or by the client dying while a question waits for its person;
//! several instances on one config side by side.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::gateway::{audit, config_with};

/// The client's end of a raw JSON-RPC session with `gatehouse serve`.
struct Session {
    child: Child,
    stream: Option<UnixStream>,
    reader: BufReader<UnixStream>,
}

/// How stdin and stdout reach `gatehouse serve`.
#[derive(Clone, Copy, Debug)]
enum Wiring {
    /// One socketpair for both, as libuv and Bun clients do.
    Socketpair,
    /// Pipes, as most clients do.
    Pipes,
}

impl Session {
    fn start(config: &Path, kind: Wiring) -> Session {
        let mut command = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
        command
            .arg("serve")
            .arg("--config")
            .arg(config)
            .stderr(Stdio::null());
        match kind {
            Wiring::Socketpair => {
                let (ours, theirs) = UnixStream::pair().expect("socketpair");
                let out = theirs.try_clone().expect("dup");
                command
                    .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
                    .stdout(Stdio::from(std::os::fd::OwnedFd::from(out)));
                let child = command.spawn().expect("gatehouse starts");
                ours.set_read_timeout(Some(Duration::from_secs(60)))
                    .expect("timeout");
                let reader = BufReader::new(ours.try_clone().expect("dup"));
                Session {
                    child,
                    stream: Some(ours),
                    reader,
                }
            }
            Wiring::Pipes => {
                // A socketpair on our side, bridged to the child's pipes by
                // two threads, so the test reads and writes one way.
                let (ours, bridge) = UnixStream::pair().expect("socketpair");
                let mut child = command
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .spawn()
                    .expect("gatehouse starts");
                let mut stdin = child.stdin.take().expect("stdin");
                let mut stdout = child.stdout.take().expect("stdout");
                let mut from_test = bridge.try_clone().expect("dup");
                let mut to_test = bridge;
                std::thread::spawn(move || relay(&mut from_test, &mut stdin));
                std::thread::spawn(move || {
                    relay(&mut stdout, &mut to_test);
                    let _ = to_test.shutdown(std::net::Shutdown::Write);
                });
                ours.set_read_timeout(Some(Duration::from_secs(60)))
                    .expect("timeout");
                let reader = BufReader::new(ours.try_clone().expect("dup"));
                Session {
                    child,
                    stream: Some(ours),
                    reader,
                }
            }
        }
    }

    fn send(&mut self, message: Value) {
        let stream = self.stream.as_mut().expect("open");
        stream
            .write_all(format!("{message}\n").as_bytes())
            .expect("send");
    }

    /// Reads messages until one `matches`; `None` at the end of output.
    fn read_until(&mut self, matches: impl Fn(&Value) -> bool) -> Option<Value> {
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line).expect("read") == 0 {
                return None;
            }
            let message: Value = serde_json::from_str(&line).expect("JSON-RPC line");
            if matches(&message) {
                return Some(message);
            }
        }
    }

    /// `initialize` (declaring form elicitations, as `name`) and
    /// `notifications/initialized`.
    fn initialize(&mut self, name: &str) -> Value {
        self.send(
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"elicitation": {"form": {}}},
                "clientInfo": {"name": name, "version": "9.8.7"},
            }}),
        );
        let answer = self
            .read_until(|message| message["id"] == 0)
            .expect("initialize answered");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        answer
    }

    /// Calls `tool` with id `id`.
    fn call(&mut self, id: u64, tool: &str, arguments: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                         "params": {"name": tool, "arguments": arguments}}));
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    /// Waits for gatehouse to exit (at most a minute, far more than it
    /// may take: a hang fails the test) and says how long it took.
    fn exited(&mut self) -> (ExitStatus, Duration) {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return (status, started.elapsed());
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "gatehouse did not exit within a minute"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Copies `from` to `to` until the end of `from` or an error, with plain
/// reads and writes: `std::io::copy` would splice, and a splice from a
/// socket into a pipe holds the pipe's lock while it waits for data, which
/// would block gatehouse's own reopen of its stdin (a test artifact no
/// client produces).
fn relay(from: &mut impl std::io::Read, to: &mut impl Write) {
    let mut buffer = [0u8; 8192];
    loop {
        match from.read(&mut buffer) {
            Ok(0) | Err(_) => return,
            Ok(read) => {
                if to.write_all(&buffer[..read]).is_err() {
                    return;
                }
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sockets(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join(".gatehouse/control"))
        .map(|entries| {
            entries
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn reload(config: &Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .arg("reload")
        .arg("--config")
        .arg(config)
        .output()
        .expect("gatehouse reload runs")
}

#[test]
fn a_signal_ends_serve_on_a_socketpair_or_pipes_cleanly() {
    for kind in [Wiring::Socketpair, Wiring::Pipes] {
        for signal in ["-TERM", "-INT"] {
            let dir = tempfile::tempdir().expect("tempdir");
            let config = config_with(dir.path(), "{}", "");
            let mut session = Session::start(&config, kind);
            session.initialize("lifecycle-test");
            // A call that reviews and audits a decision first.
            session.call(1, "git__delete_branch", json!({"branch": "main"}));
            session
                .read_until(|message| message["id"] == 1)
                .expect("answered");
            assert_eq!(sockets(dir.path()).len(), 1, "{kind:?}");
            session.signal(signal);
            let (status, took) = session.exited();
            eprintln!("{kind:?} {signal}: exited in {took:?}");
            assert!(status.success(), "{kind:?} {signal}: {status}");
            assert_eq!(audit(dir.path()).len(), 1, "{kind:?} {signal}");
            assert!(
                sockets(dir.path()).is_empty(),
                "{kind:?} {signal}: its control socket is removed"
            );
        }
    }
}

#[test]
fn a_signal_during_startup_is_a_clean_stop_not_a_failed_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(dir.path(), "{}", "");
    let mut session = Session::start(&config, Wiring::Socketpair);
    // Running (its socket is there), but no `initialize` yet.
    let started = Instant::now();
    while sockets(dir.path()).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(60), "never ran");
        std::thread::sleep(Duration::from_millis(10));
    }
    session.signal("-INT");
    let (status, _) = session.exited();
    assert!(status.success(), "{status}");
}

#[test]
fn a_client_that_dies_while_its_person_is_asked_ends_the_question_at_once() {
    for kind in [Wiring::Socketpair, Wiring::Pipes] {
        let dir = tempfile::tempdir().expect("tempdir");
        // `decline` is not the default answer of a cancel: the audit must
        // show `on_unhandled` was applied.
        let config = config_with(dir.path(), "{}", "on_unhandled = \"cancel\"");
        let mut session = Session::start(&config, kind);
        session.initialize("dying-client");
        session.call(1, "git__ask_name", json!({}));
        let asked = session
            .read_until(|message| message["method"] == "elicitation/create")
            .expect("the person is asked");
        assert!(asked["params"]["message"].is_string(), "{asked}");
        // The client dies: its end of stdin and stdout closes.
        drop(session.stream.take());
        let _ = session.reader.get_ref().shutdown(std::net::Shutdown::Both);
        let (status, took) = session.exited();
        eprintln!("{kind:?}: exited {took:?} after the client went away");
        assert!(status.success(), "{kind:?}: {status}");
        let lines = audit(dir.path());
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        assert_eq!(line["decided_by"], "unhandled", "{line}");
        assert_eq!(line["answer"]["action"], "cancel", "{line}");
        let reason = line["reason"].as_str().unwrap_or_default();
        assert!(reason.contains("went away"), "{line}");
        assert!(!reason.contains("replaced"), "{line}");
        assert_eq!(line["client"]["name"], "dying-client", "{line}");
        assert_eq!(line["client"]["version"], "9.8.7", "{line}");
    }
}

#[test]
fn instances_on_one_config_keep_their_own_sockets_and_reload_reaches_each() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(dir.path(), "{}", "");
    let mut first = Session::start(&config, Wiring::Socketpair);
    first.initialize("first-client");
    let mut second = Session::start(&config, Wiring::Pipes);
    second.initialize("second-client");
    let both = sockets(dir.path());
    assert_eq!(both.len(), 2, "{both:?}");

    let reloaded = reload(&config);
    let stdout = String::from_utf8_lossy(&reloaded.stdout).into_owned();
    assert!(reloaded.status.success(), "{reloaded:?}");
    assert_eq!(stdout.lines().count(), 2, "{stdout}");
    assert!(
        stdout.lines().all(|line| line.contains(": ok ")),
        "{stdout}"
    );

    // One decision each: the lines say which instance and client.
    first.call(1, "git__delete_branch", json!({"branch": "main"}));
    first.read_until(|message| message["id"] == 1);
    second.call(1, "git__delete_branch", json!({"branch": "dev"}));
    second.read_until(|message| message["id"] == 1);
    let lines = audit(dir.path());
    assert_eq!(lines.len(), 2, "{lines:?}");
    let instances: Vec<&str> = lines
        .iter()
        .map(|line| line["instance"].as_str().unwrap_or_default())
        .collect();
    assert_ne!(instances[0], instances[1], "{lines:?}");
    for instance in &instances {
        assert!(
            both.contains(&format!("{instance}.sock")),
            "{instance} names a socket: {both:?}"
        );
    }
    let clients: Vec<&Value> = lines.iter().map(|line| &line["client"]["name"]).collect();
    assert_eq!(clients, [&json!("first-client"), &json!("second-client")]);

    // The second ends: the first keeps its socket and still reloads.
    second.signal("-TERM");
    second.exited();
    let left = sockets(dir.path());
    assert_eq!(left, [format!("{}.sock", instances[0])]);
    let reloaded = reload(&config);
    assert!(reloaded.status.success(), "{reloaded:?}");
    let stdout = String::from_utf8_lossy(&reloaded.stdout).into_owned();
    assert!(
        stdout.starts_with(&format!("{}: ok ", instances[0])),
        "{stdout}"
    );

    // A killed instance leaves its socket; reload says so and removes it.
    let _ = first.child.kill();
    first.exited();
    let reloaded = reload(&config);
    assert_eq!(reloaded.status.code(), Some(1), "{reloaded:?}");
    let stderr = String::from_utf8_lossy(&reloaded.stderr).into_owned();
    assert!(
        stderr.contains(instances[0]) && stderr.contains("gone"),
        "{stderr}"
    );
    assert!(stderr.contains("no gatehouse serve is running"), "{stderr}");
    assert!(sockets(dir.path()).is_empty());
}

#[test]
fn initialize_never_waits_for_the_servers_and_each_appears_as_it_comes_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = crate::paths::demo_server().display().to_string();
    let guardian = crate::paths::existing(
        crate::paths::target().join("wasm32-wasip2/guest/gatehouse_guardian.wasm"),
        "run .ci/build-guests",
    )
    .display()
    .to_string();
    let marker = dir.path().join("slow-is-starting");
    // `slow` takes five seconds to start; `stuck` never answers `initialize`
    // and times out after one.
    let slow = format!(
        "sleep 5; touch {marker:?}; exec {server:?} --name slow",
        marker = marker.display().to_string()
    );
    let config = dir.path().join("gatehouse.toml");
    std::fs::write(
        &config,
        format!(
            "[mcp_servers.git]\ncommand = {server:?}\nargs = [\"--name\", \"git\"]\n\n\
             [mcp_servers.slow]\ncommand = \"/bin/sh\"\nargs = [\"-c\", {slow:?}]\n\n\
             [mcp_servers.stuck]\ncommand = {server:?}\nargs = [\"--hang\"]\nstartup_timeout_sec = 1\n\n\
             [[review.modules]]\npath = {guardian:?}\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\n"
        ),
    )
    .expect("write config");
    let mut session = Session::start(&config, Wiring::Socketpair);
    let started = Instant::now();
    session.initialize("impatient-client");
    eprintln!("initialize answered in {:?}", started.elapsed());
    assert!(
        !marker.exists(),
        "initialize was answered only once the slow server was starting"
    );
    let tools = |session: &mut Session, id: u64| -> Vec<String> {
        session.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}));
        let listed = session
            .read_until(|message| message["id"] == id)
            .expect("tools/list answered");
        listed["result"]["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
            .collect()
    };
    let first = tools(&mut session, 1);
    assert!(first.contains(&"git__echo".to_owned()), "{first:?}");
    assert!(
        !first.iter().any(|tool| tool.starts_with("slow__")),
        "{first:?}"
    );
    // The git server works while the others are still coming up.
    session.call(2, "git__echo", json!({"text": "early"}));
    let echoed = session
        .read_until(|message| message["id"] == 2)
        .expect("answered");
    assert!(echoed.to_string().contains("[git] early"), "{echoed}");
    // `slow` comes up: the client is told, and its tools are listed.
    session
        .read_until(|message| {
            message["method"] == "notifications/tools/list_changed"
                && std::fs::metadata(&marker).is_ok()
        })
        .expect("tools/list_changed");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = tools(&mut session, 3);
        if now.contains(&"slow__echo".to_owned()) {
            assert!(now.contains(&"git__echo".to_owned()), "{now:?}");
            assert!(!now.iter().any(|tool| tool.starts_with("stuck__")));
            break;
        }
        assert!(Instant::now() < deadline, "slow never listed: {now:?}");
        session
            .read_until(|message| message["method"] == "notifications/tools/list_changed")
            .expect("tools/list_changed");
    }
}

/// A signal that comes between two of serve's waits (here: just after the
/// answer to `initialize`) is not lost: serve listens from its start.
#[test]
fn a_signal_right_after_initialize_is_never_lost() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(dir.path(), "{}", "");
    for round in 0..12 {
        let mut session = Session::start(&config, Wiring::Pipes);
        session.initialize("quick-client");
        session.signal("-TERM");
        let (status, took) = session.exited();
        assert!(status.success(), "round {round}: {status} after {took:?}");
        // The client is still there: only the signal can have ended it.
        assert!(session.stream.is_some());
    }
}

/// A pseudo-terminal pair (raw mode, so the line discipline passes JSON
/// lines as they are): the client's end and gatehouse's.
fn pty_pair() -> (std::fs::File, std::os::fd::OwnedFd) {
    use std::os::fd::FromRawFd;
    let (mut ours, mut theirs) = (-1, -1);
    // SAFETY: openpty writes two new descriptors into the integers it is
    // given and reads nothing else (null name, termios and size); each is
    // owned once, below.
    let opened = unsafe {
        libc::openpty(
            &mut ours,
            &mut theirs,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(opened, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened by openpty and are owned by
    // nothing else.
    let (ours, theirs) = unsafe {
        (
            std::fs::File::from_raw_fd(ours),
            std::os::fd::OwnedFd::from_raw_fd(theirs),
        )
    };
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a zeroed termios is a valid value to fill; tcgetattr and
        // tcsetattr only read and write that struct for a descriptor we own.
        let mut raw: libc::termios = unsafe { std::mem::zeroed() };
        unsafe {
            assert_eq!(libc::tcgetattr(theirs.as_raw_fd(), &mut raw), 0);
            libc::cfmakeraw(&mut raw);
            assert_eq!(libc::tcsetattr(theirs.as_raw_fd(), libc::TCSANOW, &raw), 0);
        }
    }
    (ours, theirs)
}

/// On a pseudo-terminal (a client that runs its servers under a pty, or
/// `gatehouse serve` started by hand) a signal ends serve cleanly too: the
/// read of stdin blocks as on a socketpair.
#[test]
fn a_signal_ends_serve_on_a_pty_cleanly() {
    for signal in ["-TERM", "-INT"] {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = config_with(dir.path(), "{}", "");
        let (ours, theirs) = pty_pair();
        let out = theirs.try_clone().expect("dup");
        let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::from(theirs))
            .stdout(Stdio::from(out))
            .stderr(Stdio::null())
            .spawn()
            .expect("gatehouse starts");
        let mut writer = ours.try_clone().expect("dup");
        writeln!(
            writer,
            "{}",
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "pty-test", "version": "0"}}})
        )
        .expect("write initialize");
        let mut reader = BufReader::new(ours);
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                reader.read_line(&mut line).expect("read") > 0,
                "the pty closed before initialize was answered"
            );
            // The terminal may show the serve banner first: skip what is
            // not the answer.
            if serde_json::from_str::<Value>(line.trim()).is_ok_and(|answer| answer["id"] == 0) {
                break;
            }
        }
        writeln!(
            writer,
            "{}",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"})
        )
        .expect("write initialized");
        let deadline = Instant::now() + Duration::from_secs(60);
        while sockets(dir.path()).is_empty() {
            assert!(Instant::now() < deadline, "no control socket");
            std::thread::sleep(Duration::from_millis(10));
        }
        let started = Instant::now();
        let killed = Command::new("kill")
            .args([signal, &child.id().to_string()])
            .status()
            .expect("kill");
        assert!(killed.success());
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{signal}: gatehouse on a pty did not exit within a minute"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        eprintln!("pty {signal}: exited in {:?}", started.elapsed());
        assert!(status.success(), "pty {signal}: {status}");
        assert!(
            sockets(dir.path()).is_empty(),
            "pty {signal}: its control socket is removed"
        );
    }
}

/// Stdin a file (a client that replays a recorded session, or `< file`):
/// gatehouse answers what it holds and ends cleanly at its end.
#[test]
fn a_file_on_stdin_is_answered_and_its_end_ends_serve_cleanly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_with(dir.path(), "{}", "");
    let input = dir.path().join("session.jsonl");
    std::fs::write(
        &input,
        format!(
            "{}\n{}\n{}\n",
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "file-test", "version": "0"}}}),
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        ),
    )
    .expect("write the session");
    let output = dir.path().join("answers.jsonl");
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .arg("serve")
        .arg("--config")
        .arg(&config)
        .stdin(std::fs::File::open(&input).expect("open the session"))
        .stdout(std::fs::File::create(&output).expect("create the answers"))
        .stderr(Stdio::null())
        .spawn()
        .expect("gatehouse starts");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "gatehouse did not end at the end of its stdin file"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    eprintln!("file: exited in {:?}", started.elapsed());
    assert!(status.success(), "{status}");
    let answers = std::fs::read_to_string(&output).expect("answers");
    let ids: Vec<Value> = answers
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|answer| answer["id"].clone())
        .collect();
    assert!(ids.contains(&json!(0)), "initialize answered: {answers}");
    assert!(
        sockets(dir.path()).is_empty(),
        "its control socket is removed"
    );
}
