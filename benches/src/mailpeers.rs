//! Real mail-account servers on 127.0.0.1 for the credential tests and the benchmark, each a
//! scratch process in a temporary directory, killed on drop:
//! - [`Dovecot`] (Debian's `dovecot-imapd`): IMAP with STARTTLS on one port and TLS on another,
//!   its own configuration, a passwd file of one account and a Maildir, run with `dovecot -F -c`
//!   (never as the system service); or without TLS at all (`ssl = no`: no STARTTLS offered).
//! - [`Submission`]: an aiosmtpd submission server requiring AUTH of one account, over TLS,
//!   after STARTTLS, or without any TLS (`peers/submission_peer.py`).
//!
//! Both present a certificate of a CA made for them ([`TestCa`]), which courrier trusts through
//! `COURRIER_EXTRA_CA`.

use crate::tls::TestCa;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SUBMISSION_PEER: &str = include_str!("../peers/submission_peer.py");

/// The account every peer knows.
pub const USER: &str = "lists@example.org";
pub const PASSWORD: &str = "s3cret-Pa55word";

fn wait_listening(child: &mut Child, port: u16, what: &str, log: &Path) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!(
                "{what} exited ({status}) before listening:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            ));
        }
        if Instant::now() > deadline {
            return Err(format!("{what} did not listen within 20 s"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

fn free_port() -> Result<u16, String> {
    crate::free_port()
}

/// Dovecot serving one account's Maildir.
pub struct Dovecot {
    /// IMAP, STARTTLS offered (unless started without TLS).
    pub imap_port: u16,
    /// IMAP over TLS from the first byte (0 when started without TLS).
    pub imaps_port: u16,
    pub ca: Option<TestCa>,
    child: Child,
    pub dir: tempfile::TempDir,
}

impl Dovecot {
    /// With TLS: STARTTLS on `imap_port`, TLS on `imaps_port`, a certificate for `imap.test`
    /// and 127.0.0.1.
    pub fn start() -> Result<Self, String> {
        Self::start_with(true)
    }

    /// `tls: false`: no certificate, `ssl = no`, so STARTTLS is not offered.
    pub fn start_with(tls: bool) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let d = dir.path();
        // The mail processes run as the account's uid: when we are root, Dovecot's own `dovecot`
        // user (it refuses root); otherwise ourselves, every service as us, no chroot.
        let root = own_uid() == 0;
        let (uid, gid) = if root { id_of("dovecot")? } else { (own_uid(), own_gid()) };
        for sub in ["run", "state", "mail"] {
            std::fs::create_dir(d.join(sub)).map_err(|e| e.to_string())?;
        }
        let status = Command::new("chmod").arg("755").arg(d).status().map_err(|e| e.to_string())?;
        if !status.success() {
            return Err("chmod failed".into());
        }
        if root {
            let status = Command::new("chown")
                .arg(format!("{uid}:{gid}"))
                .arg(d.join("mail"))
                .status()
                .map_err(|e| e.to_string())?;
            if !status.success() {
                return Err("chown failed".into());
            }
        }
        let ca = if tls {
            Some(TestCa::make(d, "Courrier mail test CA", "imap.test", "DNS:imap.test,IP:127.0.0.1")?)
        } else {
            None
        };
        std::fs::write(d.join("passwd"), format!("{USER}:{{PLAIN}}{PASSWORD}::::::\n")).map_err(|e| e.to_string())?;
        let imap_port = free_port()?;
        let imaps_port = if tls { free_port()? } else { 0 };
        let users = if root {
            "default_internal_user = dovecot\ndefault_login_user = dovenull\n".to_owned()
        } else {
            let me = whoami()?;
            format!(
                "default_internal_user = {me}\ndefault_login_user = {me}\n\
                 service imap-login {{\n  chroot =\n  user = {me}\n}}\nservice auth {{\n  user = {me}\n}}\n\
                 service anvil {{\n  chroot =\n  user = {me}\n}}\n"
            )
        };
        let ssl = match &ca {
            Some(ca) => format!(
                "ssl = yes\nssl_cert = <{}\nssl_key = <{}\ndisable_plaintext_auth = yes\n",
                ca.cert.display(),
                ca.key.display()
            ),
            None => "ssl = no\ndisable_plaintext_auth = no\n".to_owned(),
        };
        let imaps = if tls {
            format!("  inet_listener imaps {{\n    address = 127.0.0.1\n    port = {imaps_port}\n    ssl = yes\n  }}\n")
        } else {
            String::new()
        };
        let conf = format!(
            "protocols = imap\nlisten = 127.0.0.1\nbase_dir = {base}/run\nstate_dir = {base}/state\n\
             log_path = {base}/dovecot.log\nfirst_valid_uid = 1\nfirst_valid_gid = 1\n\
             auth_mechanisms = plain login\nauth_failure_delay = 0\nmailbox_idle_check_interval = 1 secs\n{users}{ssl}\
             passdb {{\n  driver = passwd-file\n  args = scheme=PLAIN username_format=%u {base}/passwd\n}}\n\
             userdb {{\n  driver = static\n  args = uid={uid} gid={gid} home={base}/mail/%u\n}}\n\
             mail_location = maildir:~/Maildir\n\
             service imap-login {{\n  inet_listener imap {{\n    address = 127.0.0.1\n    port = {imap_port}\n  }}\n{imaps}}}\n\
             service stats {{\n  inet_listener http {{\n    port = 0\n  }}\n}}\n",
            base = d.display(),
        );
        std::fs::write(d.join("dovecot.conf"), conf).map_err(|e| e.to_string())?;
        let log = d.join("out.log");
        let mut child = Command::new("dovecot")
            .arg("-F")
            .arg("-c")
            .arg(d.join("dovecot.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("cannot run dovecot (Debian's dovecot-imapd; scripts/setup-system --test): {e}"))?;
        wait_listening(&mut child, imap_port, "dovecot", &log)?;
        Ok(Self { imap_port, imaps_port, ca, child, dir })
    }

    /// What Dovecot logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dovecot.log")).unwrap_or_default()
            + &std::fs::read_to_string(self.dir.path().join("out.log")).unwrap_or_default()
    }

    /// The account's Maildir (`cur` and `new` hold its messages).
    pub fn maildir(&self) -> PathBuf {
        self.dir.path().join("mail").join(USER).join("Maildir")
    }

    /// Messages in the account's INBOX now.
    pub fn inbox_count(&self) -> usize {
        ["new", "cur"].iter().map(|sub| std::fs::read_dir(self.maildir().join(sub)).map_or(0, |d| d.count())).sum()
    }
}

impl Drop for Dovecot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How a [`Submission`] server protects its sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Tls,
    StartTls,
    /// No TLS at all: STARTTLS is not offered.
    Plain,
}

/// The aiosmtpd submission server.
pub struct Submission {
    pub port: u16,
    pub ca: TestCa,
    child: Child,
    pub dir: tempfile::TempDir,
}

impl Submission {
    /// `python`: a python with aiosmtpd (the CI venv's).
    pub fn start(python: &Path, mode: Mode) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let d = dir.path();
        let ca = TestCa::make(d, "Courrier submission test CA", "smtp.test", "DNS:smtp.test,IP:127.0.0.1")?;
        std::fs::write(d.join("submission_peer.py"), SUBMISSION_PEER).map_err(|e| e.to_string())?;
        let port = free_port()?;
        let mode_arg = match mode {
            Mode::Tls => "tls",
            Mode::StartTls => "starttls",
            Mode::Plain => "plain",
        };
        let log = d.join("peer.log");
        let mut child = Command::new(python)
            .arg(d.join("submission_peer.py"))
            .arg(port.to_string())
            .arg(mode_arg)
            .arg(&ca.cert)
            .arg(&ca.key)
            .args([USER, PASSWORD])
            .arg(d.join("maildir"))
            .arg(d.join("throttle"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).map_err(|e| e.to_string())?)
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", python.display()))?;
        wait_listening(&mut child, port, "the submission server", &log)?;
        Ok(Self { port, ca, child, dir })
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("peer.log")).unwrap_or_default()
    }

    /// While on, every MAIL FROM is answered 451 (a provider's rate limit).
    pub fn throttle(&self, on: bool) {
        let path = self.dir.path().join("throttle");
        if on {
            let _ = std::fs::write(path, b"");
        } else {
            let _ = std::fs::remove_file(path);
        }
    }

    /// Every message received, raw (each starting with `X-Peer-Auth: <login>`).
    pub fn messages(&self) -> Vec<String> {
        let mut out = Vec::new();
        for sub in ["new", "cur"] {
            let Ok(entries) = std::fs::read_dir(self.dir.path().join("maildir").join(sub)) else { continue };
            for entry in entries.flatten() {
                out.push(std::fs::read_to_string(entry.path()).unwrap_or_default());
            }
        }
        out
    }

    /// How many messages arrived (without reading them).
    pub fn count(&self) -> usize {
        ["new", "cur"]
            .iter()
            .map(|sub| std::fs::read_dir(self.dir.path().join("maildir").join(sub)).map_or(0, |d| d.count()))
            .sum()
    }
}

impl Drop for Submission {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn id_of(user: &str) -> Result<(u32, u32), String> {
    let id = |flag: &str| -> Result<u32, String> {
        let out = Command::new("id").args([flag, user]).output().map_err(|e| e.to_string())?;
        String::from_utf8_lossy(&out.stdout).trim().parse().map_err(|_| format!("no user {user}"))
    };
    Ok((id("-u")?, id("-g")?))
}

fn own_id(flag: &str) -> u32 {
    Command::new("id")
        .arg(flag)
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(u32::MAX)
}

fn own_uid() -> u32 {
    own_id("-u")
}

fn own_gid() -> u32 {
    own_id("-g")
}

fn whoami() -> Result<String, String> {
    let out = Command::new("id").arg("-un").output().map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
