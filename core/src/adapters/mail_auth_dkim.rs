//! `DkimSigning` over mail-auth's DKIM signer (RFC 6376: `rsa-sha256` with ring,
//! `relaxed/relaxed`, the headers `mailing::dkim::SIGNED` lists). The key is parsed and the
//! signer built once per domain and delivery round; each copy then costs one canonicalisation
//! and one RSA signature.

use crate::mailing::dkim::{CopySigner, DkimError, DkimSigning, SIGNED};
use mail_auth::common::crypto::{RsaKey, Sha256};
use mail_auth::common::headers::HeaderWriter as _;
use mail_auth::dkim::{Canonicalization, DkimSigner, Done};
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer};

#[derive(Debug, Clone, Copy, Default)]
pub struct MailAuthDkim;

impl DkimSigning for MailAuthDkim {
    fn open(&self, domain: &str, selector: &str, private_der: &[u8]) -> Result<Box<dyn CopySigner>, DkimError> {
        // OpenSSL 3 writes PKCS#8; older keys may be PKCS#1.
        let key = RsaKey::<Sha256>::from_key_der(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(private_der)))
            .or_else(|_| RsaKey::<Sha256>::from_key_der(PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(private_der))))
            .map_err(|e| DkimError::BadKey(e.to_string()))?;
        let signer = DkimSigner::from_key(key)
            .domain(domain)
            .selector(selector)
            .headers(SIGNED.iter().copied())
            .header_canonicalization(Canonicalization::Relaxed)
            .body_canonicalization(Canonicalization::Relaxed);
        Ok(Box::new(Signer(signer)))
    }
}

struct Signer(DkimSigner<RsaKey<Sha256>, Done>);

impl CopySigner for Signer {
    fn signature(&self, message: &[u8]) -> Result<Vec<u8>, DkimError> {
        // The header fields (each CRLF-ended) and, from the empty line on, the body.
        let split = memchr::memmem::find(message, b"\r\n\r\n").map_or(message.len(), |i| i + 2);
        let (head, rest) = message.split_at(split);
        // mail-auth writes `h=` with the names as the message spells them; relaxed
        // canonicalisation lower-cases names anyway, so it is handed the same fields with
        // lower-case names: the signed data is the same, and `h=` reads `from:to:...`.
        let lowered = lower_case_names(head);
        let signature = self.0.sign_chained([lowered.as_slice(), rest]).map_err(|e| {
            tracing::debug!(error = %e, "mail-auth refused to sign");
            DkimError::Sign
        })?;
        Ok(layout(&signature.to_header()))
    }
}

/// Each field name up to its colon in lower case; continuation lines and values as they are.
fn lower_case_names(head: &[u8]) -> Vec<u8> {
    let mut out = head.to_vec();
    let mut line_start = true;
    let mut in_name = false;
    for b in &mut out {
        if line_start {
            in_name = *b != b' ' && *b != b'\t';
        }
        line_start = *b == b'\n';
        if in_name {
            if *b == b':' {
                in_name = false;
            } else {
                b.make_ascii_lowercase();
            }
        }
    }
    out
}

/// The field as mail-auth writes it, folded anew: every tag but `b=` on the first line (as
/// receivers and our tests read it), `b=` in lines of 72 characters. Only folding white space
/// changes, which relaxed canonicalisation of the signature field ignores.
fn layout(header: &str) -> Vec<u8> {
    let unfolded = header.trim_end().replace("\r\n\t", " ").replace("\r\n ", " ");
    let (tags, b) = match unfolded.rfind("; b=") {
        Some(i) => (&unfolded[..i + 4], &unfolded[i + 4..]),
        None => (unfolded.as_str(), ""),
    };
    let b: String = b.chars().filter(|c| !c.is_whitespace()).collect();
    let mut out = String::with_capacity(tags.len() + b.len() + 32);
    out.push_str(tags);
    let mut rest = b.as_str();
    while !rest.is_empty() {
        let take = rest.len().min(72);
        out.push_str("\r\n\t");
        out.push_str(&rest[..take]);
        rest = &rest[take..];
    }
    out.push_str("\r\n");
    out.into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2048-bit test key made with `openssl genpkey -algorithm RSA -outform DER` (test only).
    const KEY: &[u8] = include_bytes!("dkim-test-key.der");

    const MESSAGE: &[u8] = b"From: News <news@example.org>\r\nTo: a@example.net\r\nSubject: Hi\r\n\
        List-Unsubscribe: <https://x/p/unsubscribe/t>\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n\
        \r\nHello  there \r\n\r\n";

    #[test]
    fn a_copy_gets_one_signature_field_listing_the_signed_headers_with_from_oversigned() {
        let signer = MailAuthDkim.open("example.org", "s2026", KEY).unwrap();
        let field = String::from_utf8(signer.signature(MESSAGE).unwrap()).unwrap();
        let first = field.lines().next().unwrap();
        assert!(first.starts_with("DKIM-Signature: v=1; a=rsa-sha256;"), "{field}");
        for tag in ["d=example.org;", "s=s2026;", "c=relaxed/relaxed;", "bh=", "t="] {
            assert!(first.contains(tag), "{tag} on the first line: {field}");
        }
        let h = first.split("h=").nth(1).unwrap().split(';').next().unwrap().replace(' ', "");
        let names: Vec<&str> = h.split(':').collect();
        for signed in ["from", "to", "subject", "list-unsubscribe", "list-unsubscribe-post", "list-id", "reply-to"] {
            assert!(names.contains(&signed), "{signed} in h={h}");
        }
        assert_eq!(names.iter().filter(|n| **n == "from").count(), 2, "From once present, once more: h={h}");
        assert!(field.ends_with("\r\n") && field.lines().all(|l| l.len() <= 998));
        assert!(!field.replace("\r\n\t", "").trim_end().contains('\n'), "folded with CRLF TAB only");
        // Another body, another body hash.
        let other = String::from_utf8(signer.signature(&[MESSAGE, b"more\r\n"].concat()).unwrap()).unwrap();
        let bh = |f: &str| f.split("bh=").nth(1).unwrap().split(';').next().unwrap().to_owned();
        assert_ne!(bh(&field), bh(&other));
    }

    #[test]
    fn names_are_lower_cased_and_nothing_else() {
        assert_eq!(
            lower_case_names(b"Subject: Hello World\r\nX-A: B:C\r\n\tFolded: Still\r\n"),
            b"subject: Hello World\r\nx-a: B:C\r\n\tFolded: Still\r\n"
        );
    }

    #[test]
    fn bad_keys_are_refused() {
        assert!(matches!(MailAuthDkim.open("example.org", "s1", b"not a key"), Err(DkimError::BadKey(_))));
    }
}
