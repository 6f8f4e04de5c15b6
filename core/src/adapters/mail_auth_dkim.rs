//! `DkimSigning` over mail-auth's DKIM signer (RFC 6376: `rsa-sha256` with ring,
//! `relaxed/relaxed`, the headers `mailing::dkim::SIGNED` lists). The key is parsed and the
//! signer built once per domain and delivery round; each copy then costs one canonicalisation
//! and one RSA signature.
//!
//! `DkimVerifying` over mail-auth's verifier, for posts coming in. mail-auth looks keys up with
//! a resolver of its own; here every key is read first through the DNS port and handed to it as
//! its cache, which answers every name it may ask (a name not read through the port is "not
//! found"), so the library's resolver is never asked anything and its future never waits.

use crate::kernel::Dns;
use crate::mailing::dkim::{CopySigner, DkimError, DkimSigning, DkimVerifying, SIGNED};
use mail_auth::common::crypto::{RsaKey, Sha256};
use mail_auth::common::headers::HeaderWriter as _;
use mail_auth::common::parse::TxtRecordParser as _;
use mail_auth::common::verify::{DomainKey, VerifySignature as _};
use mail_auth::dkim::{Canonicalization, DkimSigner, Done};
use mail_auth::{AuthenticatedMessage, DkimResult, MessageAuthenticator, Parameters, ResolverCache, Txt};
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer, PrivatePkcs8KeyDer};
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::OnceLock;

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

/// The most signatures of one message verified: each costs a DNS lookup and an RSA
/// verification, and a post has one or two (its author's domain, its provider's).
const MAX_SIGNATURES: usize = 8;

impl DkimVerifying for MailAuthDkim {
    fn verified_domains(&self, raw: &[u8], dns: &dyn Dns) -> Vec<String> {
        // The message is anybody's: a panic in the library on some input must cost this post its
        // signatures, not the processing thread.
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| verify(raw, dns))).unwrap_or_else(|_| {
            tracing::warn!("the DKIM verifier panicked on a message: no signature counted");
            Vec::new()
        })
    }
}

fn verify(raw: &[u8], dns: &dyn Dns) -> Vec<String> {
    {
        let Some(authenticator) = authenticator() else { return Vec::new() };
        let Some(message) = AuthenticatedMessage::parse(raw) else { return Vec::new() };
        let mut keys = Keys(HashMap::new());
        for header in message.dkim_headers.iter().take(MAX_SIGNATURES) {
            let name = header.header.domain_key();
            if keys.0.contains_key(name.as_str()) {
                continue;
            }
            let txt = match dns.lookup_txt(name.trim_end_matches('.')) {
                // The first record that parses as a key, as mail-auth's own lookup takes it.
                Ok(records) => records
                    .iter()
                    .map(|r| DomainKey::parse(r.as_bytes()))
                    .find(Result::is_ok)
                    .unwrap_or(Err(mail_auth::Error::Dns(mail_auth::DnsError::InvalidRecordType)))
                    .into(),
                Err(e) => Txt::Error(mail_auth::Error::Dns(mail_auth::DnsError::Resolver(e.to_string()))),
            };
            keys.0.insert(name.into_boxed_str(), txt);
        }
        let params = Parameters::new(&message).with_txt_cache(&keys);
        let future = std::pin::pin!(authenticator.verify_dkim(params));
        // Every name mail-auth asks is answered by `keys`: it never waits on its resolver.
        let std::task::Poll::Ready(outputs) =
            std::future::Future::poll(future, &mut std::task::Context::from_waker(std::task::Waker::noop()))
        else {
            tracing::warn!("DKIM verification waited on a lookup it was not given: no signature counted");
            return Vec::new();
        };
        outputs
            .iter()
            .take(MAX_SIGNATURES)
            .filter(|o| *o.result() == DkimResult::Pass)
            .filter_map(|o| o.signature())
            .map(|s| s.d.to_ascii_lowercase())
            .collect()
    }
}

/// mail-auth's verifier, built once: its resolver (no name server) is never asked, see above.
fn authenticator() -> Option<&'static MessageAuthenticator> {
    static ONE: OnceLock<Option<MessageAuthenticator>> = OnceLock::new();
    ONE.get_or_init(|| {
        // The resolver's handles want a runtime to be built in, though none ever runs here.
        let runtime = tokio::runtime::Builder::new_current_thread().build().ok()?;
        let _entered = runtime.enter();
        let config = mail_auth::hickory_resolver::config::ResolverConfig::from_name_servers(Vec::new());
        MessageAuthenticator::new(config, Default::default())
            .inspect_err(|e| tracing::warn!(error = %e, "cannot build the DKIM verifier: posts are taken as unsigned"))
            .ok()
    })
    .as_ref()
}

/// The keys read through the DNS port for one message, as mail-auth's TXT cache. A name it
/// was not given is answered "not found" rather than left to the library's resolver.
struct Keys(HashMap<Box<str>, Txt>);

impl ResolverCache<Box<str>, Txt> for Keys {
    fn get<Q>(&self, name: &Q) -> Option<Txt>
    where
        Box<str>: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        Some(
            self.0
                .get(name)
                .cloned()
                .unwrap_or(Txt::Error(mail_auth::Error::Dns(mail_auth::DnsError::InvalidRecordType))),
        )
    }

    fn remove<Q>(&self, _: &Q) -> Option<Txt>
    where
        Box<str>: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        None
    }

    fn insert(&self, _: Box<str>, _: Txt, _: std::time::Instant) {}
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
    /// A fresh key pair, its record published under `s1._domainkey.example.net`.
    fn signer_and_dns() -> (Box<dyn CopySigner>, crate::kernel::TableDns) {
        use crate::mailing::dkim::DkimKeyMaker as _;
        use base64::Engine as _;
        let pair = crate::adapters::openssl_dkim::OpensslKeyMaker::default().make().unwrap();
        let record =
            format!("v=DKIM1; k=rsa; p={}", base64::engine::general_purpose::STANDARD.encode(&pair.public_spki));
        let dns = crate::kernel::TableDns::default();
        dns.txt.lock().unwrap().insert("s1._domainkey.example.net".into(), Ok(vec![record]));
        (MailAuthDkim.open("example.net", "s1", &pair.private_der).unwrap(), dns)
    }

    #[test]
    fn a_signature_verifies_with_the_key_read_through_the_dns_port_and_nothing_else_does() {
        let (signer, dns) = signer_and_dns();
        let signed = [signer.signature(MESSAGE).unwrap().as_slice(), MESSAGE].concat();
        assert_eq!(MailAuthDkim.verified_domains(&signed, &dns), vec!["example.net".to_owned()]);
        let changed = String::from_utf8(signed.clone()).unwrap().replace("Hello", "Hullo");
        assert!(MailAuthDkim.verified_domains(changed.as_bytes(), &dns).is_empty(), "a changed body");
        assert!(MailAuthDkim.verified_domains(MESSAGE, &dns).is_empty(), "unsigned");
        let elsewhere = crate::kernel::TableDns::default();
        assert!(MailAuthDkim.verified_domains(&signed, &elsewhere).is_empty(), "no key published");
        elsewhere
            .txt
            .lock()
            .unwrap()
            .insert("s1._domainkey.example.net".into(), Err(crate::kernel::DnsError("timeout".into())));
        assert!(MailAuthDkim.verified_domains(&signed, &elsewhere).is_empty(), "the key cannot be read");
        assert!(MailAuthDkim.verified_domains(b"\xff\x00 not mail", &dns).is_empty());
    }

    /// `l=` signs only the first bytes of the body: anyone may append to such a message and keep
    /// it "verified" (RFC 6376 8.2). mail-auth's strict parsing drops such signatures; this pins
    /// it, since a post's standing relies on it.
    #[test]
    fn a_signature_of_part_of_the_body_vouches_for_nothing() {
        use crate::mailing::dkim::DkimKeyMaker as _;
        use base64::Engine as _;
        let pair = crate::adapters::openssl_dkim::OpensslKeyMaker::default().make().unwrap();
        let record =
            format!("v=DKIM1; k=rsa; p={}", base64::engine::general_purpose::STANDARD.encode(&pair.public_spki));
        let dns = crate::kernel::TableDns::default();
        dns.txt.lock().unwrap().insert("s1._domainkey.example.net".into(), Ok(vec![record]));
        let signer = |length: bool| {
            DkimSigner::from_key(
                RsaKey::<Sha256>::from_key_der(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
                    pair.private_der.as_slice(),
                )))
                .or_else(|_| {
                    RsaKey::<Sha256>::from_key_der(PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(
                        pair.private_der.as_slice(),
                    )))
                })
                .unwrap(),
            )
            .domain("example.net")
            .selector("s1")
            .headers(["From", "To", "Subject"])
            .body_length(length)
        };
        let sign = |length: bool| {
            let header = signer(length).sign(MESSAGE).unwrap().to_header();
            [header.as_bytes(), MESSAGE].concat()
        };
        assert_eq!(MailAuthDkim.verified_domains(&sign(false), &dns), vec!["example.net".to_owned()], "the whole body");
        let partial = sign(true);
        assert!(String::from_utf8_lossy(&partial).contains(" l="), "signed with l=");
        assert!(
            MailAuthDkim.verified_domains(&partial, &dns).is_empty(),
            "l=: text may be appended, so it counts for nothing"
        );
    }
}
