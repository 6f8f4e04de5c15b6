//! A certificate authority of its own and a server certificate it signed, made by the openssl
//! CLI in a directory: for HTTPS receivers on 127.0.0.1 (bench-webhooks' receiver, the webhook
//! tests' peer), trusted the way `COURRIER_EXTRA_CA` makes courrier trust them.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct TestCa {
    /// The CA's certificate (PEM), to trust.
    pub ca_pem: PathBuf,
    /// The server's certificate (PEM) and its private key (PEM).
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCa {
    /// In `dir`: a P-256 CA named `ca_name`, and a P-256 server certificate for `leaf_name` with
    /// the subject alternative names `san` (`DNS:hooks.test,IP:127.0.0.1`), valid two days.
    pub fn make(dir: &Path, ca_name: &str, leaf_name: &str, san: &str) -> Result<Self, String> {
        let run = |args: &[&str]| -> Result<(), String> {
            let out =
                Command::new("openssl").args(args).current_dir(dir).output().map_err(|e| format!("openssl: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!("openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr)))
            }
        };
        let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
        let ca_subject = format!("/CN={ca_name}");
        run(&[
            &["req", "-x509"],
            &ec[..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                &ca_subject,
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        ]
        .concat())?;
        let leaf_subject = format!("/CN={leaf_name}");
        run(&[&["req"], &ec[..], &["-keyout", "leaf.key", "-out", "leaf.csr", "-subj", &leaf_subject]].concat())?;
        std::fs::write(
            dir.join("leaf.ext"),
            format!(
                "subjectAltName={san}\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n\
                 extendedKeyUsage=serverAuth\n"
            ),
        )
        .map_err(|e| format!("cannot write {}: {e}", dir.join("leaf.ext").display()))?;
        run(&[
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "leaf.pem",
            "-days",
            "2",
            "-extfile",
            "leaf.ext",
        ])?;
        Ok(Self { ca_pem: dir.join("ca.pem"), cert: dir.join("leaf.pem"), key: dir.join("leaf.key") })
    }
}
