//! DKIM key pairs made by the `openssl` command (Debian's `openssl` package): `ring` signs with
//! RSA but cannot generate RSA keys, and the `rsa` crate carries RUSTSEC-2023-0071 (the Marvin
//! timing attack). Key generation is rare (a domain's selector set or changed), so a child
//! process is cheap.

use crate::mailing::dkim::{DkimError, DkimKeyMaker, KeyPair};
use std::io::Write;
use std::process::{Command, Stdio};

pub struct OpensslKeyMaker {
    program: String,
}

impl Default for OpensslKeyMaker {
    fn default() -> Self {
        Self { program: "openssl".into() }
    }
}

fn run(program: &str, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, DkimError> {
    let failed = |what: String| DkimError::BadKey(format!("{program} {}: {what}", args.first().unwrap_or(&"")));
    let mut child = Command::new(program)
        .args(args)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| failed(format!("cannot run it ({e}); install the openssl package")))?;
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(bytes).map_err(|e| failed(e.to_string()))?;
    }
    let out = child.wait_with_output().map_err(|e| failed(e.to_string()))?;
    if !out.status.success() || out.stdout.is_empty() {
        return Err(failed(String::from_utf8_lossy(&out.stderr).trim().chars().take(300).collect()));
    }
    Ok(out.stdout)
}

impl DkimKeyMaker for OpensslKeyMaker {
    fn make(&self) -> Result<KeyPair, DkimError> {
        let p = self.program.as_str();
        let private_der =
            run(p, &["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-outform", "DER"], None)?;
        let public_spki = run(p, &["pkey", "-inform", "DER", "-pubout", "-outform", "DER"], Some(&private_der))?;
        Ok(KeyPair { private_der, public_spki })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::mail_auth_dkim::MailAuthDkim;
    use crate::mailing::dkim::DkimSigning as _;

    #[test]
    fn openssl_makes_a_key_that_signs() {
        let pair = OpensslKeyMaker::default().make().expect("openssl is installed (scripts/setup-system)");
        assert!(pair.public_spki.len() > 256, "a 2048-bit SubjectPublicKeyInfo");
        let signer = MailAuthDkim.open("example.org", "s1", &pair.private_der).unwrap();
        assert!(signer.signature(b"From: a@example.org\r\n\r\nx\r\n").is_ok());
        let missing = OpensslKeyMaker { program: "/nonexistent/openssl".into() }.make().unwrap_err();
        assert!(missing.to_string().contains("install the openssl package"), "{missing}");
    }
}
