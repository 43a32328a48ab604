//! Telemetry against the real tools: Debian's `prometheus` scrapes the
//! console process that sums two `gatehouse serve` instances, `promtool`
//! checks the exposition and the alert rules (and runs their unit tests),
//! and an instance's own `/readyz` flips as a backend and the audit log fail
//! and recover.
//!
//! The tools come from `tests/prometheus/setup` (`.ci/run` runs it and sets
//! `GATEHOUSE_PROMETHEUS_TESTS=1`, so a missing tool fails the tests there);
//! elsewhere the tests skip when `/usr/bin/prometheus` is not installed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rmcp::ServiceExt;
use serde_json::Value;

use crate::console_support::{decisions, elicit, name_form};
use crate::http_gateway::{HttpGateway, reload};

/// The directory holding `prometheus` and `promtool`, or `None` to skip.
fn tools() -> Option<PathBuf> {
    let dir = PathBuf::from(
        std::env::var("GATEHOUSE_PROMETHEUS_BIN").unwrap_or_else(|_| "/usr/bin".to_owned()),
    );
    if dir.join("promtool").is_file() && dir.join("prometheus").is_file() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("GATEHOUSE_PROMETHEUS_TESTS").is_none(),
        "GATEHOUSE_PROMETHEUS_TESTS is set but prometheus and promtool are not in {}: run tests/prometheus/setup",
        dir.display()
    );
    eprintln!(
        "skipped: no prometheus in {} (tests/prometheus/setup installs it)",
        dir.display()
    );
    None
}

/// A loopback port nobody listens on now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// The monitoring files in the repository.
fn monitoring(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/monitoring")
        .join(file)
}

/// A config with demo-server `demo` (or `backend` as its table), the
/// guardian and `[telemetry]` on `port`.
fn config(dir: &Path, port: u16, backend: &str) -> PathBuf {
    let path = dir.join("gatehouse.toml");
    let backend = if backend.is_empty() {
        format!(
            "[mcp_servers.demo]\ncommand = {:?}\nargs = [\"--name\", \"demo\"]\nrequired = true\n",
            crate::paths::demo_server().display().to_string()
        )
    } else {
        backend.to_owned()
    };
    std::fs::write(
        &path,
        format!(
            "{backend}\n[[review.modules]]\npath = {guardian:?}\n\n\
             [telemetry]\nlisten = \"127.0.0.1:{port}\"\n\n\
             [elicitations]\naudit_log = \"audit.jsonl\"\naudit_sync = \"batch\"\n",
            guardian = crate::paths::guest("gatehouse_guardian")
                .display()
                .to_string(),
        ),
    )
    .expect("write config");
    path
}

/// `GET url` with `host` as the Host header; the status and the body.
async fn get(url: &str, accept: Option<&str>) -> (u16, String) {
    let mut request = reqwest::Client::new().get(url);
    if let Some(accept) = accept {
        request = request.header("accept", accept);
    }
    let response = request.send().await.expect("GET");
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

/// The sum of every sample of `name` whose labels contain each of `labels`
/// (`key="value"`), in a classic text exposition.
fn sample_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter(|line| labels.iter().all(|label| line.contains(label)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A child process killed when dropped (a failed assertion leaves none
/// behind).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Stops `child` as an operator would (SIGTERM) and waits for it.
fn terminate(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// `gatehouse console` on `config`: its process and the telemetry address
/// it printed.
fn console(config: &Path) -> (Running, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatehouse"))
        .args(["console", "--listen", "127.0.0.1:0", "--config"])
        .arg(config)
        .env("GATEHOUSE_CONSOLE_TOKEN", "telemetry-test-token-0123456789")
        .env("RUST_LOG", "gatehouse=info")
        .stdout(Stdio::piped())
        .spawn()
        .expect("gatehouse console starts");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let telemetry = lines
        .find_map(|line| {
            line.ok()?
                .strip_prefix("telemetry on ")
                .map(|url| url.trim_end_matches("/metrics").to_owned())
        })
        .expect("the telemetry line");
    (Running(child), telemetry)
}

/// Prometheus on a free loopback port scraping `target` every second.
struct Prometheus {
    child: Child,
    api: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    fn start(tools: &Path, target: &str) -> Prometheus {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files: [{rules:?}]\n\
                 scrape_configs:\n  - job_name: gatehouse\n    static_configs:\n      - targets: [{target:?}]\n",
                rules = monitoring("gatehouse-rules.yml").display().to_string(),
            ),
        )
        .expect("prometheus.yml");
        let child = Command::new(tools.join("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus starts");
        Prometheus {
            child,
            api: format!("http://127.0.0.1:{port}/api/v1"),
            _dir: dir,
        }
    }

    /// The value of the instant query `query` once it equals `expected`
    /// (waits up to 60 s, the scrapes and rule evaluations it takes).
    async fn until(&self, query: &str, expected: f64) -> f64 {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let mut last = Value::Null;
        loop {
            if let Ok(response) = reqwest::Client::new()
                .get(format!("{}/query", self.api))
                .query(&[("query", query)])
                .send()
                .await
                && let Ok(body) = response.json::<Value>().await
            {
                let value = body["data"]["result"][0]["value"][1]
                    .as_str()
                    .and_then(|value| value.parse::<f64>().ok());
                if value == Some(expected) {
                    return expected;
                }
                last = body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{query} never became {expected}: {last}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_every_instances_counts_and_an_ended_instances_stay() {
    let Some(tools) = tools() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config(dir.path(), free_port(), "");
    let (mut console, telemetry) = console(&config);
    // A long-running HTTP instance, and one on stdio as a client starts one
    // per session.
    let mut first = HttpGateway::start(&config);
    let first_client = std::sync::Arc::new(().serve(first.transport()).await.expect("initialize"));
    let second_client = std::sync::Arc::new(crate::gateway::stdio_client(&config, ()).await);
    for round in 0..3 {
        elicit(&first_client, name_form(&format!("first {round}")))
            .await
            .expect("first instance's call");
    }
    for round in 0..2 {
        elicit(&second_client, name_form(&format!("second {round}")))
            .await
            .expect("second instance's call");
    }
    // The first instance ends as an operator stops it: its last numbers
    // reach the console on the way out.
    drop(first_client);
    terminate(&mut first.child);
    let audited = decisions(dir.path());
    assert_eq!(audited.len(), 5, "{audited:?}");
    let prometheus = Prometheus::start(&tools, telemetry.trim_start_matches("http://"));
    prometheus
        .until("sum(gatehouse_elicitations_total{server=\"demo\"})", 5.0)
        .await;
    prometheus.until("gatehouse_instances", 1.0).await;
    // Each (decided_by, action) as the audit lines have it.
    let mut by_outcome = std::collections::BTreeMap::<(String, String), f64>::new();
    for line in &audited {
        let key = (
            line["decided_by"].as_str().unwrap_or_default().to_owned(),
            line["action"].as_str().unwrap_or_default().to_owned(),
        );
        *by_outcome.entry(key).or_default() += 1.0;
    }
    for ((decided_by, action), count) in &by_outcome {
        prometheus
            .until(
                &format!(
                    "sum(gatehouse_elicitations_total{{decided_by=\"{decided_by}\",action=\"{action}\"}})"
                ),
                *count,
            )
            .await;
    }
    // Each module's reviews, as many as the audit lines' steps.
    let steps = audited
        .iter()
        .flat_map(|line| line["steps"].as_array().cloned().unwrap_or_default())
        .filter(|step| step["module"] == "gatehouse_guardian")
        .count();
    assert!(steps > 0, "the guardian reviewed: {audited:?}");
    prometheus
        .until(
            "sum(gatehouse_reviews_total{module=\"gatehouse_guardian\"})",
            steps as f64,
        )
        .await;
    prometheus
        .until("sum(gatehouse_audit_writes_total{result=\"ok\"})", 5.0)
        .await;
    // The exposition is what promtool calls valid, in both formats' reader.
    let (status, text) = get(&format!("{telemetry}/metrics"), None).await;
    assert_eq!(status, 200);
    assert_eq!(
        sample_sum(&text, "gatehouse_elicitations_total", &[]),
        5.0,
        "{text}"
    );
    let (passed, said) = promtool_check_metrics(&tools, &text);
    assert!(passed, "promtool check metrics: {said}");
    // The stdio instance's client goes, and the instance with it; the
    // console keeps every count.
    if let Ok(client) = std::sync::Arc::try_unwrap(second_client) {
        let _ = client.cancel().await;
    }
    prometheus.until("gatehouse_instances", 0.0).await;
    prometheus
        .until("sum(gatehouse_elicitations_total{server=\"demo\"})", 5.0)
        .await;
    terminate(&mut console.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_flips_as_a_required_backend_and_the_audit_log_fail_and_recover() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("no-such-server");
    let config = config(
        dir.path(),
        free_port(),
        &format!(
            "[mcp_servers.demo]\ncommand = {:?}\nrequired = true\n",
            missing.display().to_string()
        ),
    );
    let port = free_port();
    let (child, _url) = crate::paths::spawn_listening(
        Command::new(env!("CARGO_BIN_EXE_gatehouse"))
            .args(["serve", "--listen", "127.0.0.1:0", "--metrics"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "gatehouse=info"),
        "listening on ",
        "gatehouse serve starts",
    );
    let mut child = Running(child);
    let base = format!("http://127.0.0.1:{port}");
    let until = |want: u16, contains: &'static str| {
        let url = format!("{base}/readyz");
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                let (status, body) = get(&url, None).await;
                if status == want && body.contains(contains) {
                    return body;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "/readyz never {want} with {contains:?}: {status} {body}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    assert_eq!(get(&format!("{base}/healthz"), None).await.0, 200);
    until(503, "failed backend demo: failed").await;
    // The backend fixed in the config: ready.
    let fixed = std::fs::read_to_string(&config).expect("config").replace(
        &format!("{:?}", missing.display().to_string()),
        &format!(
            "{:?}\nargs = [\"--name\", \"demo\"]",
            crate::paths::demo_server().display().to_string()
        ),
    );
    std::fs::write(&config, fixed).expect("rewrite config");
    let (reloaded, said) = reload(&config);
    assert!(reloaded, "{said}");
    let ready = until(200, "ok backend demo: connected").await;
    assert!(ready.contains("ok audit: writable"), "{ready}");
    // The audit log removed (a rotation without its reopen): not ready,
    // until the reopen.
    std::fs::remove_file(dir.path().join("audit.jsonl")).expect("remove the audit log");
    until(503, "failed audit:").await;
    let (reloaded, said) = reload(&config);
    assert!(reloaded, "{said}");
    until(200, "ok audit: writable").await;
    // A page that rebinds its own name to 127.0.0.1 cannot read the numbers.
    let response = reqwest::Client::new()
        .get(format!("{base}/metrics"))
        .header("host", format!("rebound.example:{port}"))
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status().as_u16(), 421);
    // The numbers: one instance, its backend connected.
    let (_, text) = get(
        &format!("{base}/metrics"),
        Some("application/openmetrics-text"),
    )
    .await;
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(text.contains("gatehouse_instances 1"), "{text}");
    assert!(
        text.contains("gatehouse_backends{server=\"demo\",state=\"connected\"} 1"),
        "{text}"
    );
    // The backend's attempts: the failures before the fix, one connection.
    let failed = sample_sum(
        &text,
        "gatehouse_backend_starts_total",
        &["server=\"demo\"", "result=\"failed\""],
    );
    assert!(failed >= 1.0, "{text}");
    assert!(
        text.contains("gatehouse_backend_starts_total{server=\"demo\",result=\"connected\"} 1"),
        "{text}"
    );
    let swaps = sample_sum(&text, "gatehouse_module_swaps_total", &["result=\"ok\""]);
    assert!(swaps >= 3.0, "a start and two reloads at least: {text}");
    // The guardian compiled once into the config's new compile cache (a
    // reload that comes while the first load compiles joins that compile),
    // its functions compiled and kept; a later reload takes the artifact.
    let total =
        |family: &str, result: &str| sample_sum(&text, family, &[&format!("result=\"{result}\"")]);
    let (missed, hit, joined) = (
        total("gatehouse_compile_cache_total", "miss"),
        total("gatehouse_compile_cache_total", "hit"),
        total("gatehouse_compile_cache_total", "joined"),
    );
    assert_eq!(missed, 1.0, "{text}");
    assert!(missed + hit + joined >= 3.0, "{text}");
    assert!(
        total("gatehouse_compiled_functions_total", "compiled") >= 100.0,
        "{text}"
    );
    assert!(
        text.contains("gatehouse_compiled_functions_total{result=\"reused\"}"),
        "{text}"
    );
    terminate(&mut child.0);
}

/// Runs `promtool check metrics` on `text`; whether it passed, and what it
/// said.
fn promtool_check_metrics(tools: &Path, text: &str) -> (bool, String) {
    use std::io::Write;
    let mut check = Command::new(tools.join("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let checked = check.wait_with_output().expect("promtool runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    (checked.status.success(), said)
}

#[test]
fn hostile_names_cannot_break_the_exposition() {
    use gatehouse_telemetry::exposition::{Format, render};
    use gatehouse_telemetry::families::{BACKENDS, ELICITATIONS, REVIEWS};
    use gatehouse_telemetry::series::{Levels, Metrics};
    let Some(tools) = tools() else { return };
    let metrics = Metrics::default();
    let hostile = [
        "a\"} 1\ngatehouse_forged_total 9\n# TYPE x counter",
        "back\\slash\\",
        "\u{202e}reversed\r\0nul",
        "{le=\"+Inf\"}",
        "",
    ];
    let mut levels = Levels::default();
    for name in hostile {
        metrics.count(&ELICITATIONS, &[name, "form", "guest", "accept"], 1);
        metrics.count(&REVIEWS, &[name, name, "failure", "trap"], 1);
        levels.set(&BACKENDS, &[name, "failed"], 1);
    }
    let snapshot = levels.into_snapshot(metrics.snapshot());
    let text = render(&snapshot, Format::Text);
    let (passed, said) = promtool_check_metrics(&tools, &text);
    assert!(passed, "promtool check metrics: {said}\n{text}");
    assert!(!text.contains("\ngatehouse_forged_total"), "{text}");
    let open = render(&snapshot, Format::OpenMetrics);
    assert_eq!(
        open.lines()
            .filter(|line| line.starts_with("gatehouse_elicitations_total{"))
            .count(),
        hostile.len(),
        "one line per hostile series: {open}"
    );
}

#[test]
fn the_alert_rules_are_valid_and_fire_on_what_they_name() {
    let Some(tools) = tools() else { return };
    for args in [vec!["check", "rules"], vec!["test", "rules"]] {
        let file = if args[0] == "check" {
            monitoring("gatehouse-rules.yml")
        } else {
            monitoring("gatehouse-rules.test.yml")
        };
        let output = Command::new(tools.join("promtool"))
            .args(&args)
            .arg(&file)
            .output()
            .expect("promtool runs");
        assert!(
            output.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn the_dashboard_queries_only_metrics_gatehouse_exports() {
    let text = std::fs::read_to_string(monitoring("grafana-dashboard.json")).expect("dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("dashboard JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 8, "{} panels", panels.len());
    let exported: Vec<String> = gatehouse_telemetry::families::ALL
        .iter()
        .map(|family| family.full_name())
        .collect();
    let mut used = std::collections::BTreeSet::new();
    for panel in panels {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("an expr");
            let names: Vec<&str> = expr
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .filter(|word| word.starts_with("gatehouse_"))
                .collect();
            assert!(!names.is_empty(), "{expr}");
            for name in names {
                let family = name
                    .trim_end_matches("_total")
                    .trim_end_matches("_bucket")
                    .trim_end_matches("_count")
                    .trim_end_matches("_sum");
                assert!(
                    exported.iter().any(|exported| exported == family),
                    "{name} in {expr:?} is not a gatehouse metric"
                );
                used.insert(family.to_owned());
            }
        }
    }
    for family in [
        "gatehouse_elicitations",
        "gatehouse_fail_closed",
        "gatehouse_backends",
    ] {
        assert!(used.contains(family), "no panel shows {family}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_waiting_in_the_console_is_counted_until_the_person_answers() {
    use crate::console_support::{ConsoleProcess, Session, TOKEN};
    let dir = tempfile::tempdir().expect("tempdir");
    let config = crate::console_support::config(dir.path(), "person = \"console\"");
    let port = free_port();
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!("\n[telemetry]\nlisten = \"127.0.0.1:{port}\"\n"));
    std::fs::write(&config, text).expect("config");
    let console = ConsoleProcess::start(&config);
    let gateway = HttpGateway::start(&config);
    let client = std::sync::Arc::new(().serve(gateway.transport()).await.expect("initialize"));
    let call = elicit(&client, name_form("who are you?"));
    let session = Session::login(&console.base, TOKEN).await.expect("login");
    let open = session.open(1).await;
    let metrics = format!("http://127.0.0.1:{port}/metrics");
    let until = |sample: &'static str| {
        let metrics = metrics.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            loop {
                let (_, text) = get(&metrics, None).await;
                if text.lines().any(|line| line == sample) {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "never {sample:?}: {text}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    until("gatehouse_person_questions_pending{channel=\"console\"} 1").await;
    until("gatehouse_person_questions_pending{channel=\"client\"} 0").await;
    let (status, said) = session
        .answer(&serde_json::json!({"id": open[0]["id"], "action": "accept", "content": {"name": "Ada"}}))
        .await;
    assert_eq!(status.as_u16(), 200, "{said}");
    let result = call.await.expect("the call");
    assert!(result.contains("Ada"), "{result}");
    until("gatehouse_person_questions_pending{channel=\"console\"} 0").await;
    until("gatehouse_person_answers_total{channel=\"console\",action=\"accept\"} 1").await;
}
