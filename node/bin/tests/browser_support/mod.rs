//! A real headless Chromium driven through WebDriver (Debian's `chromium` and `chromium-driver`,
//! which scripts/install-test-deps.sh installs), for the web console's tests: ChromeDriver on a
//! loopback port of its own, one browser session, and waits that poll the page until a condition
//! holds or a deadline passes. ChromeDriver and the browser it started are killed on drop (their
//! process group), also when a test panics, so no Chromium outlives its test.
// Each test binary uses a different part.
#![allow(dead_code)]

use std::future::Future;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// How long a page may take to show what a test waits for.
pub const PAGE_TIMEOUT: Duration = Duration::from_secs(20);

/// The pause between two looks at the page while waiting.
const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// True when Chromium and ChromeDriver are installed. Outside CI a missing browser lets a test
/// pass with a note (as a missing etcd does); under `CI=true` it fails the test.
pub fn browser_installed() -> bool {
    if Path::new(CHROMEDRIVER).is_file() && Path::new(CHROMIUM).is_file() {
        return true;
    }
    let under_ci = std::env::var("CI").is_ok_and(|value| value == "true");
    assert!(
        !under_ci,
        "{CHROMIUM} or {CHROMEDRIVER} is missing; CI needs Debian's chromium and chromium-driver"
    );
    eprintln!("note: chromium or chromium-driver is not installed; test not run");
    false
}

/// One browser session, and the ChromeDriver process behind it.
pub struct Browser {
    pub client: Client,
    driver: Child,
    /// The browser's profile and its temporary files. Chromium is killed, so it never removes
    /// the `org.chromium.Chromium.*` directories it makes under TMPDIR; they are made here
    /// instead, and go when this directory is dropped, after the browser is dead.
    _session_directory: tempfile::TempDir,
}

impl Drop for Browser {
    /// Ends ChromeDriver and every process it started. Chromium outlives a killed ChromeDriver
    /// (its session was never closed), so the whole process group goes: ChromeDriver was started
    /// as the leader of a group of its own, and Chromium and its helpers are in it.
    fn drop(&mut self) {
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill")
            .args(["-KILL", "--", &group])
            .stderr(Stdio::null())
            .status();
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address").port()
}

/// How a browser session differs from the default.
#[derive(Clone, Copy, Debug, Default)]
pub struct BrowserOptions {
    /// Accept any server certificate: for a cluster whose test CA the browser cannot know.
    pub accept_any_certificate: bool,
    /// Ask pages for their dark colours (`prefers-color-scheme: dark`).
    pub dark: bool,
}

/// Chromium's flags: headless, and none of its own network traffic (this machine's network is
/// closed, and refused connections would slow every page).
fn chrome_options(profile: &Path, dark: bool) -> Value {
    let mut arguments = vec![
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-dev-shm-usage".into(),
        "--disable-quic".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--window-size=1300,900".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    if dark {
        arguments.push("--force-dark-mode".into());
    }
    json!({ "binary": CHROMIUM, "args": arguments })
}

impl Browser {
    pub async fn start() -> Browser {
        Browser::start_with(BrowserOptions::default()).await
    }

    pub async fn start_with(options: BrowserOptions) -> Browser {
        let port = free_port();
        let session_directory = tempfile::tempdir().expect("session directory");
        let profile = session_directory.path().join("profile");
        let temporary_files = session_directory.path().join("tmp");
        std::fs::create_dir(&temporary_files).expect("temporary-files directory");
        let driver = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            // Chromium inherits it from ChromeDriver.
            .env("TMPDIR", &temporary_files)
            // A process group of its own, which Drop kills whole.
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            chrome_options(&profile, options.dark),
        );
        capabilities.insert(
            "acceptInsecureCerts".into(),
            json!(options.accept_any_certificate),
        );
        let mut builder =
            ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new());
        builder.capabilities(capabilities);
        let webdriver = format!("http://127.0.0.1:{port}");
        let deadline = Instant::now() + PAGE_TIMEOUT;
        let client = loop {
            match builder.connect(&webdriver).await {
                Ok(client) => break client,
                Err(error) if Instant::now() < deadline => {
                    let _ = error;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("no WebDriver session from chromedriver: {error}"),
            }
        };
        Browser {
            client,
            driver,
            _session_directory: session_directory,
        }
    }

    pub async fn open(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|error| panic!("open {url}: {error}"));
    }

    /// Polls `probe` until it answers `Some`, failing the test with `what` after `timeout`.
    pub async fn wait_for<T, F, Fut>(&self, what: &str, timeout: Duration, mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(found) = probe().await {
                return found;
            }
            if Instant::now() >= deadline {
                let url = self.client.current_url().await.map(|url| url.to_string());
                let text = self.body_text().await;
                panic!("waited {timeout:?} for {what}; at {url:?} the page shows:\n{text}");
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// The first element `css` selects once there is one.
    pub async fn element(&self, css: &str) -> Element {
        let client = &self.client;
        self.wait_for(
            &format!("an element {css}"),
            PAGE_TIMEOUT,
            move || async move { client.find(Locator::Css(css)).await.ok() },
        )
        .await
    }

    /// Waits until the text of the element `css` selects satisfies `accept`, and answers it.
    pub async fn text_when(&self, css: &str, accept: impl Fn(&str) -> bool) -> String {
        let (client, accept) = (&self.client, &accept);
        let what = format!("the text of {css} to be as expected");
        self.wait_for(&what, PAGE_TIMEOUT, move || async move {
            let element = client.find(Locator::Css(css)).await.ok()?;
            let text = element.text().await.ok()?;
            accept(&text).then_some(text)
        })
        .await
    }

    /// Every element `css` selects now.
    pub async fn all(&self, css: &str) -> Vec<Element> {
        self.client
            .find_all(Locator::Css(css))
            .await
            .unwrap_or_default()
    }

    /// The values of `attribute` of every element `css` selects now.
    pub async fn attributes(&self, css: &str, attribute: &str) -> Vec<String> {
        let mut values = Vec::new();
        for element in self.all(css).await {
            if let Ok(Some(value)) = element.attr(attribute).await {
                values.push(value);
            }
        }
        values
    }

    pub async fn click(&self, css: &str) {
        let element = self.element(css).await;
        element
            .click()
            .await
            .unwrap_or_else(|error| panic!("click {css}: {error}"));
    }

    /// Replaces the text of the input or text area `css` selects.
    pub async fn type_into(&self, css: &str, text: &str) {
        let element = self.element(css).await;
        element
            .clear()
            .await
            .unwrap_or_else(|error| panic!("clear {css}: {error}"));
        element
            .send_keys(text)
            .await
            .unwrap_or_else(|error| panic!("type into {css}: {error}"));
    }

    /// The page's background colour as the browser computed it (`rgb(r, g, b)`).
    pub async fn background_colour(&self) -> String {
        let script = "return getComputedStyle(document.documentElement).backgroundColor;";
        let colour = self
            .client
            .execute(script, vec![])
            .await
            .expect("run a script");
        colour.as_str().unwrap_or_default().to_string()
    }

    pub async fn body_text(&self) -> String {
        match self.client.find(Locator::Css("body")).await {
            Ok(body) => body.text().await.unwrap_or_default(),
            Err(error) => format!("(no body: {error})"),
        }
    }

    /// A screenshot of the page as it is, written to `directory/name.png`.
    pub async fn screenshot(&self, directory: &Path, name: &str) -> PathBuf {
        let png = self.client.screenshot().await.expect("screenshot");
        assert!(png.starts_with(b"\x89PNG"), "a screenshot is a PNG");
        let path = directory.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write the screenshot");
        path
    }
}
