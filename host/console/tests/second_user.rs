//! A second local user against the console's socket, both ways round: a
//! process of another uid that reaches the socket (here its directory is
//! opened up on purpose, as a mistake would) can neither attach nor put a
//! question on the console; and an instance refuses to hand a question to a
//! "console" another user serves.
//!
//! The other user is uid 65534 (`nobody`), entered with `setpriv`, which
//! needs root: CI runs as root; elsewhere the tests say they are skipped.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use gatehouse_console::hub::Hub;
use gatehouse_console::link::{Link, LinkError};
use gatehouse_console::question::{Ask, Question};

const NOBODY: &str = "65534";

/// `python3 -c script` as uid 65534, or `None` (skipped) when this process
/// cannot switch users.
fn as_nobody(script: &str) -> Option<Command> {
    if gatehouse_base::private_fs::effective_uid() != 0 || !Path::new("/usr/bin/setpriv").exists() {
        eprintln!("skipped: entering another uid needs root and setpriv");
        return None;
    }
    let mut command = Command::new("/usr/bin/setpriv");
    command
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            script,
        ])
        .stdin(Stdio::null());
    Some(command)
}

/// A directory anyone may enter and write.
fn open_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    dir
}

fn question() -> Question {
    Question {
        server: "github".into(),
        ask: Ask::Url {
            message: "Sign in".into(),
            url: "https://github.com/login".into(),
        },
        session: None,
        client: None,
        call: None,
        verdicts: vec![],
        why: "every module deferred".into(),
        timeout_ms: 60_000,
    }
}

#[tokio::test]
async fn another_user_cannot_attach_or_ask() {
    let dir = open_dir();
    let path = dir.path().join("console.sock");
    let listener = tokio::net::UnixListener::bind(&path).expect("bind");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let hub = Arc::new(Hub::new());
    let stop = tokio_util::sync::CancellationToken::new();
    tokio::spawn(gatehouse_console::socket::serve(
        listener,
        hub.clone(),
        stop.clone(),
    ));
    let ask = serde_json::json!({"type": "ask", "id": 1, "question": question()}).to_string();
    let script = format!(
        "import socket, sys\n\
         s = socket.socket(socket.AF_UNIX)\n\
         s.connect({path:?})\n\
         try:\n\
         \x20   s.sendall(b'{{\"type\":\"hello\",\"instance\":\"intruder\",\"pid\":1}}\\n' + {ask:?}.encode() + b'\\n')\n\
         \x20   s.settimeout(10)\n\
         \x20   data = s.recv(65536)\n\
         except (BrokenPipeError, ConnectionResetError):\n\
         \x20   data = b''\n\
         print('closed' if data == b'' else 'answered: ' + data.decode())\n",
        path = path.display().to_string(),
    );
    let Some(mut command) = as_nobody(&script) else {
        return;
    };
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("join")
        .expect("python runs");
    let said = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        said.trim(),
        "closed",
        "the other user's connection is closed unanswered: {said} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let snapshot = hub.snapshot();
    assert!(snapshot.instances.is_empty(), "never attached");
    assert!(snapshot.open.is_empty(), "no question on the console");
    stop.cancel();
}

#[tokio::test]
async fn an_instance_hands_nothing_to_a_console_another_user_serves() {
    let dir = open_dir();
    let path = dir.path().join("console.sock");
    let received = dir.path().join("received");
    let script = format!(
        "import socket, os\n\
         s = socket.socket(socket.AF_UNIX)\n\
         s.bind({path:?})\n\
         os.chmod({path:?}, 0o777)\n\
         s.listen(1)\n\
         open({ready:?}, 'w').close()\n\
         c, _ = s.accept()\n\
         c.settimeout(3)\n\
         data = b''\n\
         try:\n\
         \x20   while True:\n\
         \x20       chunk = c.recv(65536)\n\
         \x20       if not chunk: break\n\
         \x20       data += chunk\n\
         except socket.timeout:\n\
         \x20   pass\n\
         open({received:?}, 'wb').write(data)\n",
        path = path.display().to_string(),
        ready = dir.path().join("ready").display().to_string(),
        received = received.display().to_string(),
    );
    let Some(mut command) = as_nobody(&script) else {
        return;
    };
    let mut child = command.spawn().expect("python runs");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !dir.path().join("ready").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the other user's socket"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let link = Link::new(&path, "instance-1");
    let refused = link.ask(question()).await;
    assert!(
        matches!(refused, Err(LinkError::Foreign { .. })),
        "{refused:?}"
    );
    let _ = tokio::task::spawn_blocking(move || child.wait()).await;
    let sent = std::fs::read(&received).expect("what the other user received");
    assert!(
        sent.is_empty(),
        "nothing was sent to it: {}",
        String::from_utf8_lossy(&sent)
    );
}
