//! A real browser for the tests: Debian's Chromium, headless, driven over
//! WebDriver by `chromedriver` (`tests/browser/setup` installs both; `.ci/run`
//! sets `GATEHOUSE_BROWSER_TESTS=1`, and then a missing browser fails the
//! test instead of skipping it).
//!
//! A module of the gathered test binary `host/cli/tests/all`.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};

/// `chromedriver` on a loopback port, killed when dropped. It and its
/// browsers have a temporary directory of their own, as `TMPDIR` too: a
/// killed Chromium leaves its scoped directories behind, and they go with it
/// rather than piling up in `/tmp`.
pub struct Driver {
    child: Child,
    url: String,
    _profiles: tempfile::TempDir,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The chromedriver to use: `GATEHOUSE_CHROMEDRIVER`, else
/// `/usr/bin/chromedriver`; `None` (the test is skipped) when there is none
/// and `GATEHOUSE_BROWSER_TESTS` is not set.
fn chromedriver() -> Option<String> {
    let path = std::env::var("GATEHOUSE_CHROMEDRIVER")
        .unwrap_or_else(|_| "/usr/bin/chromedriver".to_owned());
    if std::path::Path::new(&path).exists() {
        return Some(path);
    }
    assert!(
        std::env::var_os("GATEHOUSE_BROWSER_TESTS").is_none(),
        "GATEHOUSE_BROWSER_TESTS is set but {path} is missing: run tests/browser/setup"
    );
    eprintln!("skipped: no chromedriver (run tests/browser/setup)");
    None
}

impl Driver {
    /// Starts chromedriver, or `None` to skip (see [`chromedriver`]).
    pub async fn start() -> Option<Driver> {
        let path = chromedriver()?;
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            listener.local_addr().expect("address").port()
        };
        let profiles = tempfile::tempdir().expect("tempdir");
        let child = Command::new(path)
            .arg(format!("--port={port}"))
            .env("TMPDIR", profiles.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let url = format!("http://127.0.0.1:{port}");
        let driver = Driver {
            child,
            url,
            _profiles: profiles,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                tokio::time::Instant::now() < deadline,
                "chromedriver did not listen"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some(driver)
    }

    /// A new headless browser window with its own profile (its own cookies).
    pub async fn browser(&self) -> Browser {
        let profile = tempfile::tempdir_in(self._profiles.path()).expect("profile");
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({"args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1100", "--no-first-run", "--disable-extensions",
                format!("--user-data-dir={}", profile.path().display()),
            ]}),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let client = ClientBuilder::new(connector)
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .expect("a browser session");
        Browser {
            client,
            _profile: profile,
        }
    }
}

/// One browser window.
pub struct Browser {
    /// The WebDriver client.
    pub client: Client,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Opens `url`.
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.expect("goto");
    }

    /// The first element matching `css`, waiting up to 30 s for it.
    pub async fn wait_for(&self, css: &str) -> fantoccini::elements::Element {
        match self
            .client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(Locator::Css(css))
            .await
        {
            Ok(element) => element,
            Err(error) => {
                let url = self.client.current_url().await.map(|u| u.to_string());
                let page = self.client.source().await.unwrap_or_default();
                panic!("{css}: {error}\nat {url:?}:\n{page}")
            }
        }
    }

    /// Runs `script` (a function body; `arguments` as WebDriver passes them).
    pub async fn run(&self, script: &str) -> Value {
        self.client
            .execute(script, Vec::new())
            .await
            .unwrap_or_else(|error| panic!("{script}: {error}"))
    }

    /// Waits until `script` returns true (up to 30 s).
    pub async fn until(&self, what: &str, script: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while self.run(script).await != Value::Bool(true) {
            assert!(tokio::time::Instant::now() < deadline, "{what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Logs in on the console at `base` with `token`, by keyboard: the
    /// token typed into the focused field, then Enter.
    pub async fn login(&self, base: &str, token: &str) {
        self.goto(&format!("{base}/")).await;
        let field = self.wait_for("#token").await;
        field
            .send_keys(&format!("{token}\u{E007}"))
            .await
            .expect("type");
        self.wait_for("#questions").await;
        self.until(
            "the events stream is live",
            "return document.getElementById('link-state').textContent === 'live';",
        )
        .await;
    }

    /// Saves a screenshot as `<name>.png` in the directory
    /// `GATEHOUSE_SCREENSHOTS` names, when it names one (the pictures in
    /// docs/ are made so).
    pub async fn screenshot(&self, name: &str) {
        let Some(dir) = std::env::var_os("GATEHOUSE_SCREENSHOTS") else {
            return;
        };
        let png = self.client.screenshot().await.expect("screenshot");
        let path = std::path::Path::new(&dir).join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
    }
}
