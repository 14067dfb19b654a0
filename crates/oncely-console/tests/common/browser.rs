//! A headless Chromium over WebDriver: `chromedriver` (Debian's chromium-driver) started on a
//! free port for the test, killed when the [`Browser`] drops.

use fantoccini::elements::Element;
use fantoccini::error::CmdError;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator};
use oncely_testkit::services;
use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// How long a lookup keeps trying while the page is still loading (a click's navigation, a
/// form's submit): pages of a loaded 2-core machine can take a few seconds.
const PATIENCE: Duration = Duration::from_secs(20);

/// One browser at a time in a test process: several headless Chromiums at once on a small
/// machine starve each other (and the databases) into timeouts.
fn turn() -> Arc<tokio::sync::Mutex<()>> {
    static TURN: OnceLock<Arc<tokio::sync::Mutex<()>>> = OnceLock::new();
    TURN.get_or_init(Arc::default).clone()
}

/// A browser session and its driver process.
pub struct Browser {
    pub client: Client,
    driver: Child,
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn which(name: &str) -> Option<String> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .map(|p| p.display().to_string())
}

/// The Chromium binary: `chromium` (Debian) or `chromium-browser`.
fn chromium() -> Option<String> {
    which("chromium").or_else(|| which("chromium-browser"))
}

/// Starts chromedriver and a headless Chromium, or `None` (SKIPPED banner; a failure under CI)
/// when they are not installed.
pub async fn start(test: &str) -> Option<Browser> {
    let (Some(driver), Some(chrome)) = (which("chromedriver"), chromium()) else {
        services::unavailable(
            test,
            "chromium and chromium-driver",
            &"not installed (apt-get install chromium chromium-driver)",
        );
        return None;
    };
    let turn = turn().lock_owned().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let driver = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting chromedriver");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": chrome,
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1100,760", "--hide-scrollbars"],
        }),
    );
    caps.insert(
        "goog:loggingPrefs".into(),
        serde_json::json!({ "browser": "ALL" }),
    );
    let url = format!("http://127.0.0.1:{port}");
    // rustls needs one process-wide crypto provider; the workspace's test build enables two
    // (ring and aws-lc-rs, through different crates), so it cannot pick one by itself.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut last = None;
    for _ in 0..50 {
        match ClientBuilder::rustls()
            .unwrap()
            .capabilities(caps.clone())
            .connect(&url)
            .await
        {
            Ok(client) => {
                return Some(Browser {
                    client,
                    driver,
                    _turn: turn,
                });
            }
            Err(e) => last = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("chromedriver did not start a session: {last:?}");
}

/// `POST /session/{id}/se/log {"type": "browser"}`: the console messages so far (chromedriver).
#[derive(Debug)]
struct BrowserLog;

impl WebDriverCompatibleCommand for BrowserLog {
    fn endpoint(
        &self,
        base: &url::Url,
        session: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }
    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some("{\"type\":\"browser\"}".into()))
    }
}

impl Browser {
    pub async fn goto(&self, url: &str) {
        self.client.goto(url).await.unwrap();
    }

    /// Finds `css` and runs `act` on it, trying again while the element is missing or stale
    /// (the page is still loading), for up to [`PATIENCE`].
    async fn with<T, F, Fut>(&self, css: &str, act: F) -> T
    where
        F: Fn(Element) -> Fut,
        Fut: Future<Output = Result<T, CmdError>>,
    {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let result = match self.client.find(Locator::Css(css)).await {
                Ok(element) => act(element).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(value) => return value,
                Err(e) if Instant::now() >= deadline => panic!("{css}: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    pub async fn text(&self, css: &str) -> String {
        self.with(css, |e| async move { e.text().await }).await
    }

    /// Clicks `css` on the page as it is (a checkbox: no navigation).
    pub async fn click(&self, css: &str) {
        self.with(css, |e| async move { e.click().await }).await
    }

    /// Clicks `css` (a link, a submit button) and waits until the browser has left the page
    /// it was on, so what is read next comes from the new page, not the old one.
    pub async fn click_through(&self, css: &str) {
        let old = self
            .client
            .find(Locator::Css("html"))
            .await
            .unwrap_or_else(|e| panic!("the page before clicking {css}: {e}"));
        self.click(css).await;
        let deadline = Instant::now() + PATIENCE;
        while old.tag_name().await.is_ok() {
            assert!(
                Instant::now() < deadline,
                "clicking {css} did not leave the page"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn fill(&self, css: &str, value: &str) {
        self.with(css, |e| async move {
            e.clear().await?;
            e.send_keys(value).await
        })
        .await
    }

    /// The page's whole text.
    pub async fn body(&self) -> String {
        self.text("body").await
    }

    /// Console messages (errors and warnings included) since the last call.
    pub async fn console(&self) -> Vec<serde_json::Value> {
        let v = self
            .client
            .issue_cmd(BrowserLog)
            .await
            .expect("reading the browser log");
        v.as_array().cloned().unwrap_or_default()
    }

    /// Asserts that no alert is open and that the console logged no error.
    pub async fn assert_clean(&self, what: &str) {
        if let Ok(text) = self.client.get_alert_text().await {
            panic!("{what}: an alert fired: {text:?}");
        }
        let errors: Vec<_> = self
            .console()
            .await
            .into_iter()
            .filter(|m| m["level"] == "SEVERE" || m["level"] == "WARNING")
            .collect();
        assert!(errors.is_empty(), "{what}: console messages: {errors:?}");
    }

    /// Waits for the job page to say finished (it refreshes itself).
    pub async fn wait_job(&self) {
        for _ in 0..300 {
            if let Ok(e) = self.client.find(Locator::Css("#job-state")).await
                && e.attr("data-state").await.ok().flatten().as_deref() == Some("finished")
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("the job did not finish");
    }

    /// `data-id` → outcome on a job page.
    pub async fn outcomes(&self) -> std::collections::BTreeMap<i64, String> {
        self.retrying("span.outcome", || async {
            let mut out = std::collections::BTreeMap::new();
            for e in self.client.find_all(Locator::Css("span.outcome")).await? {
                let id = e.attr("data-id").await?.unwrap_or_default();
                out.insert(id.parse().expect("numeric data-id"), e.text().await?);
            }
            Ok(out)
        })
        .await
    }

    /// Every `[data-count]` number on the page, by its key.
    pub async fn counts(&self) -> Vec<(String, i64)> {
        self.retrying("[data-count]", || async {
            let mut out = Vec::new();
            for e in self.client.find_all(Locator::Css("[data-count]")).await? {
                let key = e.attr("data-count").await?.unwrap_or_default();
                let n = e.text().await?.trim().parse().expect("a number");
                out.push((key, n));
            }
            Ok(out)
        })
        .await
    }

    /// Runs `read` until it succeeds (an element went stale while the page reloaded), for up
    /// to [`PATIENCE`].
    async fn retrying<T, F, Fut>(&self, what: &str, read: F) -> T
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, CmdError>>,
    {
        let deadline = Instant::now() + PATIENCE;
        loop {
            match read().await {
                Ok(value) => return value,
                Err(e) if Instant::now() >= deadline => panic!("{what}: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Takes a screenshot (the page is checked to render, always) and saves it to the folder
    /// `ONCELY_CONSOLE_SCREENSHOTS` names, if set: `ONCELY_CONSOLE_SCREENSHOTS=docs/console`
    /// refreshes the pictures of docs/console.md. Unset, a test run leaves the checkout clean.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.unwrap();
        assert!(png.starts_with(b"\x89PNG"), "{name}: not a PNG");
        let Some(dir) = std::env::var_os("ONCELY_CONSOLE_SCREENSHOTS") else {
            return;
        };
        // The package's directory at run time (tests run there), not a compiled-in path.
        let dir = std::env::current_dir().unwrap().join("../..").join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(format!("{name}.png")), png).unwrap();
    }
}
