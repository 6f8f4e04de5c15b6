//! A real headless Chromium for the page tests, driven over W3C WebDriver through Debian's
//! `chromedriver`. The client is plain HTTP/JSON with the tests' own `ureq` and `serde_json`:
//! the handful of commands the tests use (new session, navigate, find, click, type, execute
//! script) are one request each, and the WebDriver client crates are async (tokio + hyper
//! client stacks) for a test binary that is otherwise synchronous.
//!
//! [`Browser::start`] runs chromedriver on a free port of 127.0.0.1 with its log, and Chromium's
//! profile, in a temporary directory; Chromium runs headless, with `--no-sandbox` when the tests
//! run as root (its sandbox refuses root). Both are gone when the [`Browser`] is dropped.
//!
//! Without Chromium or chromedriver the test FAILS, saying what to install (`scripts/setup-system
//! --test` installs both, and `.ci/run` calls it): a browser test never passes silently.

use crate::harness::{free_port, workspace_root};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The W3C WebDriver key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";
/// How long a wait for the page (a navigation, an element) lasts before the test fails.
const WAIT: Duration = Duration::from_secs(30);

/// How the browser is set up.
#[derive(Debug, Clone, Copy)]
pub struct BrowserOptions {
    /// JavaScript on (the default of browsers), or off as a reader may turn it off.
    pub javascript: bool,
    /// A phone's screen (375 x 667 CSS pixels, touch, a mobile browser's layout), or a desktop
    /// window of 1280 x 900.
    pub phone: bool,
    /// The reader's languages, as `Accept-Language` (e.g. `fr-FR,fr`).
    pub languages: &'static str,
}

/// An element of the current page.
#[derive(Debug, Clone)]
pub struct Element(String);

/// One Chromium, one WebDriver session.
pub struct Browser {
    driver: Child,
    session: String,
    agent: ureq::Agent,
    dir: tempfile::TempDir,
}

/// `name` on the `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(name)).find(|p| p.is_file())
}

/// The program named by `var`, else the first of `names` on the `PATH`.
fn program(var: &str, names: &[&str]) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(var) {
        return Some(PathBuf::from(p));
    }
    names.iter().find_map(|n| on_path(n))
}

fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// What to do when Chromium or its driver is missing.
fn missing(what: &str) -> ! {
    let ci = if std::env::var("CI").is_ok_and(|v| v == "true") {
        " (CI: .ci/run installs them through scripts/setup-system --test; this machine has not got them)"
    } else {
        ""
    };
    panic!(
        "the browser tests need {what}: Debian's `chromium` and `chromium-driver` packages \
         (`scripts/setup-system --test` installs them){ci}; COURRIER_CHROMIUM and COURRIER_CHROMEDRIVER \
         name other binaries"
    )
}

impl Browser {
    /// Starts chromedriver and a headless Chromium session with `options`.
    pub fn start(options: BrowserOptions) -> Self {
        let chromium =
            program("COURRIER_CHROMIUM", &["chromium", "chromium-browser"]).unwrap_or_else(|| missing("Chromium"));
        let chromedriver =
            program("COURRIER_CHROMEDRIVER", &["chromedriver"]).unwrap_or_else(|| missing("chromedriver"));
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let driver = Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            .arg(format!("--log-path={}", dir.path().join("chromedriver.log").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{} does not start: {e}", chromedriver.display()));
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(120)))
            .build()
            .into();
        let mut browser = Self { driver, session: String::new(), agent, dir };
        browser.wait_for_driver(port);
        browser.session = browser.new_session(port, &chromium, options);
        browser
    }

    fn driver_log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("chromedriver.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn wait_for_driver(&mut self, port: u16) {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(status) = self.driver.try_wait().unwrap() {
                panic!("chromedriver exited ({status}) before listening:\n{}", self.driver_log());
            }
            let ready = self
                .agent
                .get(format!("http://127.0.0.1:{port}/status"))
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .and_then(|body| serde_json::from_str::<Value>(&body).ok())
                .is_some_and(|v| v["value"]["ready"] == true);
            if ready {
                return;
            }
            assert!(Instant::now() < deadline, "chromedriver was not ready within {WAIT:?}:\n{}", self.driver_log());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn new_session(&self, port: u16, chromium: &Path, o: BrowserOptions) -> String {
        let profile = self.dir.path().join("profile");
        let mut args = vec![
            "--headless=new".to_owned(),
            format!("--user-data-dir={}", profile.display()),
            format!("--lang={}", o.languages.split(',').next().unwrap_or("en")),
            "--disable-dev-shm-usage".into(),
            "--disable-gpu".into(),
            "--disable-extensions".into(),
            "--disable-background-networking".into(),
            "--no-first-run".into(),
            "--no-default-browser-check".into(),
        ];
        if is_root() {
            args.push("--no-sandbox".into());
        }
        let mut chrome = json!({
            "binary": chromium,
            "args": args,
            "prefs": { "intl.accept_languages": o.languages },
        });
        if !o.javascript {
            // The browser setting a reader turns off: no script of a page runs. (WebDriver's own
            // commands still work: they do not run as the page's scripts.)
            chrome["prefs"]["profile.managed_default_content_settings.javascript"] = json!(2);
        }
        if o.phone {
            chrome["mobileEmulation"] = json!({ "deviceMetrics": { "width": 375, "height": 667, "pixelRatio": 2, "touch": true, "mobile": true } });
        } else {
            chrome["args"].as_array_mut().unwrap().push(json!("--window-size=1280,900"));
        }
        let caps = json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "pageLoadStrategy": "normal",
            // A page's confirmation before a destructive action is accepted, as a reader would.
            "unhandledPromptBehavior": "accept",
            "timeouts": { "implicit": 0, "pageLoad": 60_000, "script": 60_000 },
            "goog:chromeOptions": chrome,
        } } });
        let url = format!("http://127.0.0.1:{port}/session");
        let resp = self
            .agent
            .post(&url)
            .header("content-type", "application/json")
            .send(caps.to_string())
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        let v = read_value(resp);
        match v["value"]["sessionId"].as_str() {
            Some(id) => format!("http://127.0.0.1:{port}/session/{id}"),
            None => panic!("Chromium did not start a session: {v}\nchromedriver's log:\n{}", self.driver_log()),
        }
    }

    /// One WebDriver command on the session; its `value`. An error answer fails the test.
    fn cmd(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        match self.try_cmd(method, path, body) {
            Ok(v) => v,
            Err(e) => panic!("WebDriver {method} {path}: {e}"),
        }
    }

    fn try_cmd(&self, method: &str, path: &str, body: Option<Value>) -> Result<Value, Value> {
        let url = format!("{}{path}", self.session);
        let resp = match (method, body) {
            ("GET", _) => self.agent.get(&url).call(),
            ("DELETE", _) => self.agent.delete(&url).call(),
            (_, body) => self
                .agent
                .post(&url)
                .header("content-type", "application/json")
                .send(body.unwrap_or_else(|| json!({})).to_string()),
        };
        let v = read_value(resp.unwrap_or_else(|e| panic!("{method} {url}: {e}")));
        let value = v.get("value").cloned().unwrap_or(Value::Null);
        if value.get("error").is_some() {
            let mut e = value;
            if let Some(o) = e.as_object_mut() {
                o.remove("stacktrace");
            }
            Err(e)
        } else {
            Ok(value)
        }
    }

    /// Opens `url` and waits for it to load.
    pub fn goto(&self, url: &str) {
        self.cmd("POST", "/url", Some(json!({ "url": url })));
    }

    pub fn url(&self) -> String {
        self.cmd("GET", "/url", None).as_str().unwrap_or_default().to_owned()
    }

    pub fn title(&self) -> String {
        self.cmd("GET", "/title", None).as_str().unwrap_or_default().to_owned()
    }

    /// The page's markup as the browser holds it.
    pub fn source(&self) -> String {
        self.cmd("GET", "/source", None).as_str().unwrap_or_default().to_owned()
    }

    fn elements(&self, css: &str) -> Vec<Element> {
        let found = self.cmd("POST", "/elements", Some(json!({ "using": "css selector", "value": css })));
        found
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e[ELEMENT].as_str().map(|id| Element(id.to_owned())))
            .collect()
    }

    /// The elements matching `css` (none is an empty list).
    pub fn find_all(&self, css: &str) -> Vec<Element> {
        self.elements(css)
    }

    /// The one element matching `css`; the test fails if there is none or several.
    pub fn find(&self, css: &str) -> Element {
        let mut found = self.elements(css);
        assert_eq!(found.len(), 1, "{css}: {} elements on {}:\n{}", found.len(), self.url(), self.source());
        found.remove(0)
    }

    /// Types `text` into a field, as keystrokes.
    pub fn type_into(&self, e: &Element, text: &str) {
        self.cmd("POST", &format!("/element/{}/value", e.0), Some(json!({ "text": text })));
    }

    pub fn text(&self, e: &Element) -> String {
        self.cmd("GET", &format!("/element/{}/text", e.0), None).as_str().unwrap_or_default().to_owned()
    }

    /// Whether an option (or a checkbox) is selected.
    pub fn is_selected(&self, e: &Element) -> bool {
        self.cmd("GET", &format!("/element/{}/selected", e.0), None) == true
    }

    /// Clicks `e` as a pointer does (the element must be visible and not covered).
    pub fn click(&self, e: &Element) {
        self.cmd("POST", &format!("/element/{}/click", e.0), Some(json!({})));
    }

    /// Clicks a control that submits a form, and waits for the next page: until `e` is gone from
    /// the document (the old page was left) and the new one has loaded.
    pub fn click_and_wait(&self, e: &Element) {
        self.click(e);
        let deadline = Instant::now() + WAIT;
        while self.try_cmd("GET", &format!("/element/{}/name", e.0), None).is_ok() {
            assert!(Instant::now() < deadline, "the page did not change within {WAIT:?} ({})", self.url());
            std::thread::sleep(Duration::from_millis(20));
        }
        while self.execute("return document.readyState", &[]) != "complete" {
            assert!(Instant::now() < deadline, "the page did not load within {WAIT:?} ({})", self.url());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs `script` (a function body; `arguments` holds `args`) through WebDriver; its result.
    /// WebDriver's scripts run with the page's scripts turned off too.
    pub fn execute(&self, script: &str, args: &[Value]) -> Value {
        self.cmd("POST", "/execute/sync", Some(json!({ "script": script, "args": args })))
    }

    /// As [`Browser::execute`], `script` calling its last argument with the result.
    pub fn execute_async(&self, script: &str, args: &[Value]) -> Value {
        self.cmd("POST", "/execute/async", Some(json!({ "script": script, "args": args })))
    }

    /// A PNG of the current viewport, written to `path` (its folder made when missing).
    pub fn screenshot(&self, path: &Path) {
        use base64::Engine;
        let png = self.cmd("GET", "/screenshot", None);
        let bytes = base64::engine::general_purpose::STANDARD.decode(png.as_str().unwrap_or_default()).unwrap();
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }

    /// axe-core's violations of the current page (axe injected into it, vendored under
    /// `fixtures/axe/`), every impact; needs the page's JavaScript on (axe's checks wait on the
    /// page's event loop).
    pub fn axe_violations(&self) -> Vec<Value> {
        if self.execute("return typeof axe", &[]) != "object" {
            self.execute(&format!("{}\n;return typeof axe;", axe_source()), &[]);
        }
        let result = self.execute_async(
            "const done = arguments[arguments.length - 1];\
             axe.run(document, { resultTypes: ['violations'] })\
               .then(r => done({ ok: r.violations.map(v => ({ id: v.id, impact: v.impact, help: v.help,\
                   nodes: v.nodes.map(n => n.html) })) }))\
               .catch(e => done({ error: String(e) }));",
            &[],
        );
        match result["ok"].as_array() {
            Some(v) => v.clone(),
            None => panic!("axe did not run on {}: {result}", self.url()),
        }
    }
}

/// `fixtures/axe/axe.min.js`, read once.
fn axe_source() -> &'static str {
    static AXE: OnceLock<String> = OnceLock::new();
    AXE.get_or_init(|| {
        let path = workspace_root().join("fixtures/axe/axe.min.js");
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    })
}

fn read_value(mut resp: ureq::http::Response<ureq::Body>) -> Value {
    let status = resp.status().as_u16();
    let body = resp.body_mut().with_config().limit(64 * 1024 * 1024).read_to_string().unwrap_or_default();
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("chromedriver answered {status}, not JSON ({e}): {body}"))
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the session closes Chromium; then chromedriver goes.
        if !self.session.is_empty() {
            let _ = self.agent.delete(&self.session).call();
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}
