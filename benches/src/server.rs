//! A child server of a harness (`courrier serve`, `bare-hello`): its output in a log file, its
//! health route polled until it answers, stopped when dropped (error paths included).

use crate::http_get;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The public route every server under measure answers (bare-hello answers it too).
pub const HEALTH_PATH: &str = "/api/v1/system/health";
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// After SIGTERM, how long a server gets to exit before it is killed.
const TERM_GRACE: Duration = Duration::from_secs(30);

pub struct Server {
    /// How errors name it (`courrier`, `bare-hello`, ...).
    pub name: String,
    pub port: u16,
    /// Its standard output and error.
    pub log: PathBuf,
    child: Option<Child>,
    /// Stopped with SIGTERM (a clean close of its database) rather than killed.
    terminate: bool,
}

impl Server {
    /// Starts `cmd`, which listens on 127.0.0.1:`port`, its output going to `log`. It is killed
    /// when dropped; see [`Server::terminate_on_drop`].
    pub fn start(name: &str, mut cmd: Command, port: u16, log: PathBuf) -> Result<Self, String> {
        let file = std::fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        let file2 = file.try_clone().map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        cmd.stdin(Stdio::null()).stdout(file).stderr(file2);
        let child = cmd.spawn().map_err(|e| format!("cannot start {name} ({:?}): {e}", cmd.get_program()))?;
        Ok(Self { name: name.to_owned(), port, log, child: Some(child), terminate: false })
    }

    /// Stopped (on drop or [`Server::stop`]) with SIGTERM, and killed only if it has not exited
    /// 30 s later: the server closes its database cleanly (a data directory copied after).
    pub fn terminate_on_drop(mut self) -> Self {
        self.terminate = true;
        self
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The server's resident memory (VmRSS), in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        let pid = self.child.as_ref()?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").parse().ok())
    }

    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        if tail.is_empty() { "(its output was empty)".into() } else { format!("its last output:\n{tail}") }
    }

    /// Fails if the process is gone.
    pub fn check_alive(&mut self) -> Result<(), String> {
        let status = match self.child.as_mut().map(Child::try_wait) {
            None => Some(None),
            Some(Ok(None)) => None,
            Some(Ok(Some(status))) => Some(Some(status)),
            Some(Err(e)) => return Err(format!("cannot check on {}: {e}", self.name)),
        };
        match status {
            None => Ok(()),
            Some(status) => {
                self.child = None;
                let how = status.map_or_else(|| "was already stopped".to_owned(), |s| format!("exited ({s})"));
                Err(format!("{} {how}; {}", self.name, self.log_tail()))
            }
        }
    }

    /// Polls the health route until it answers 200; returns the raw answer.
    pub fn wait_healthy(&mut self) -> Result<String, String> {
        let deadline = Instant::now() + START_TIMEOUT;
        let mut last_error = String::from("no attempt made");
        while Instant::now() < deadline {
            self.check_alive()?;
            match http_get(self.port, HEALTH_PATH, "") {
                Ok(answer) if answer.starts_with("HTTP/1.1 200") => return Ok(answer),
                Ok(answer) => last_error = format!("answered {:?}", answer.lines().next().unwrap_or("")),
                Err(e) => last_error = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!(
            "{} did not answer GET {HEALTH_PATH} with 200 on port {} within {}s (last: {last_error}); {}",
            self.name,
            self.port,
            START_TIMEOUT.as_secs(),
            self.log_tail()
        ))
    }

    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if self.terminate {
            if let Ok(None) = child.try_wait() {
                let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
            }
            let deadline = Instant::now() + TERM_GRACE;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
