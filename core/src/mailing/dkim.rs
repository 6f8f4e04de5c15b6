//! DKIM signatures of list messages (RFC 6376: `rsa-sha256`, `relaxed/relaxed`), with the
//! domain's key. The headers receivers judge a list by are signed, `List-Unsubscribe` and
//! `List-Unsubscribe-Post` among them (RFC 8058 requires it, and so do Gmail's and Yahoo's bulk
//! sender rules). Keys are made by the key port (`DkimKeyMaker`) and kept sealed with the
//! installation's data key; this module only reads and uses them.

use crate::kernel::Timestamp;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ring::signature::{RSA_PKCS1_SHA256, RsaKeyPair};

/// Signed when present, in this order. `From` is listed twice ("oversigned") so that no second
/// `From` can be added below the signature without breaking it.
const SIGNED: &[&str] = &[
    "from",
    "to",
    "subject",
    "date",
    "message-id",
    "reply-to",
    "cc",
    "in-reply-to",
    "references",
    "list-id",
    "list-post",
    "list-help",
    "list-unsubscribe",
    "list-unsubscribe-post",
    "precedence",
    "mime-version",
    "content-type",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DkimError {
    #[error("the DKIM private key cannot be read: {0}")]
    BadKey(String),
    #[error("signing failed")]
    Sign,
}

/// A key pair as the key port makes it: the private key (DER: PKCS#8, or PKCS#1 as OpenSSL 3
/// writes it) and the public key to publish (SubjectPublicKeyInfo DER).
#[derive(Clone)]
pub struct KeyPair {
    pub private_der: Vec<u8>,
    pub public_spki: Vec<u8>,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyPair(..)")
    }
}

/// Makes DKIM key pairs (2048-bit RSA). A port: `ring` signs RSA but cannot generate it.
pub trait DkimKeyMaker: Send + Sync {
    fn make(&self) -> Result<KeyPair, DkimError>;
}

/// A domain's signing key, opened once and used for every copy.
pub struct Signer {
    domain: String,
    selector: String,
    key: RsaKeyPair,
}

impl Signer {
    pub fn new(domain: &str, selector: &str, private_der: &[u8]) -> Result<Self, DkimError> {
        let key = RsaKeyPair::from_pkcs8(private_der)
            .or_else(|_| RsaKeyPair::from_der(private_der))
            .map_err(|e| DkimError::BadKey(e.to_string()))?;
        Ok(Self { domain: domain.to_owned(), selector: selector.to_owned(), key })
    }

    /// The message with its `DKIM-Signature` header first.
    pub fn sign(&self, message: &[u8], now: Timestamp) -> Result<Vec<u8>, DkimError> {
        let (headers, body) = split(message);
        let bh = B64.encode(ring::digest::digest(&ring::digest::SHA256, &relaxed_body(body)));
        let mut names: Vec<&str> = Vec::new();
        let mut signed = String::new();
        for name in SIGNED {
            // The last occurrence of a name is the one signed (RFC 6376 5.4.2).
            if let Some((n, v)) = headers.iter().rev().find(|(n, _)| n.eq_ignore_ascii_case(name)) {
                signed.push_str(&relaxed_header(n, v));
                signed.push_str("\r\n");
                names.push(name);
            }
        }
        // `From` once more: a name listed more often than it occurs signs as nothing, so a second
        // `From` added in transit would break the signature.
        names.push("from");
        let value = format!(
            "v=1; a=rsa-sha256; c=relaxed/relaxed; d={}; s={}; t={}; h={}; bh={bh}; b=",
            self.domain,
            self.selector,
            now.unix_secs(),
            names.join(":"),
        );
        signed.push_str(&relaxed_header("DKIM-Signature", &value));
        let mut sig = vec![0; self.key.public().modulus_len()];
        self.key
            .sign(&RSA_PKCS1_SHA256, &ring::rand::SystemRandom::new(), signed.as_bytes(), &mut sig)
            .map_err(|_| DkimError::Sign)?;
        let b = B64.encode(&sig);
        // Folded at 76 columns so no line of the header runs past what relays accept.
        let mut header = format!("DKIM-Signature: {value}");
        let mut rest = b.as_str();
        while !rest.is_empty() {
            let take = rest.len().min(72);
            header.push_str("\r\n\t");
            header.push_str(&rest[..take]);
            rest = &rest[take..];
        }
        header.push_str("\r\n");
        let mut out = header.into_bytes();
        out.extend_from_slice(message);
        Ok(out)
    }
}

/// The signer of a domain whose selector has its key, read in `tx` and opened with the data key.
/// A key that does not open (the data key was replaced) is logged and the mail goes unsigned:
/// a list that still delivers is better than one that stops.
pub(crate) fn signer_for(
    app: &super::Service,
    tx: &mut dyn crate::mailing::ports::Tx,
    domain: super::model::DomainId,
) -> Result<Option<Signer>, crate::storage::StoreError> {
    let Some(d) = tx.domain_by_id(domain)? else { return Ok(None) };
    let (Some(selector), Some((made_for, sealed))) = (d.dkim_selector.as_deref(), tx.domain_dkim_private(domain)?)
    else {
        return Ok(None);
    };
    if made_for != selector {
        return Ok(None);
    }
    let opened = app
        .data_key
        .open(&sealed, &super::domains::dkim_binding(domain, selector))
        .map_err(|e| e.to_string())
        .and_then(|der| Signer::new(d.name.as_str(), selector, &der).map_err(|e| e.to_string()));
    match opened {
        Ok(signer) => Ok(Some(signer)),
        Err(why) => {
            tracing::error!(domain = %d.name, reason = %why, "the DKIM key cannot be used; mail goes unsigned");
            Ok(None)
        }
    }
}

/// Signs the message in place when there is a signer.
pub(crate) fn sign_message(signer: Option<&Signer>, message: &mut crate::kernel::OutgoingMessage, now: Timestamp) {
    if let Some(s) = signer {
        match s.sign(&message.data, now) {
            Ok(signed) => message.data = signed,
            Err(e) => tracing::error!(domain = %s.domain, error = %e, "DKIM signing failed; the copy goes unsigned"),
        }
    }
}

/// Headers (name, raw value with its folding) and the body.
fn split(message: &[u8]) -> (Vec<(String, String)>, &[u8]) {
    let end = message.windows(4).position(|w| w == b"\r\n\r\n");
    let (head, body) = match end {
        Some(i) => (&message[..i + 2], &message[i + 4..]),
        None => (message, &message[message.len()..]),
    };
    let head = String::from_utf8_lossy(head);
    let mut headers: Vec<(String, String)> = Vec::new();
    for line in head.split("\r\n").filter(|l| !l.is_empty()) {
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = headers.last_mut() {
                v.push_str("\r\n");
                v.push_str(line);
            }
        } else if let Some((name, value)) = line.split_once(':') {
            headers.push((name.to_owned(), value.to_owned()));
        }
    }
    (headers, body)
}

/// `relaxed` header canonicalisation: the name in lower case, the value unfolded, runs of white
/// space as one space, none at either end, no space around the colon.
fn relaxed_header(name: &str, value: &str) -> String {
    let unfolded = value.replace("\r\n", "");
    let mut v = String::with_capacity(unfolded.len());
    let mut space = false;
    for c in unfolded.chars() {
        if c == ' ' || c == '\t' {
            space = true;
        } else {
            if space && !v.is_empty() {
                v.push(' ');
            }
            space = false;
            v.push(c);
        }
    }
    format!("{}:{v}", name.trim().to_ascii_lowercase())
}

/// `relaxed` body canonicalisation: runs of white space as one space, none at line ends, no empty
/// lines at the end, and the body (when not empty) ending with one CRLF.
fn relaxed_body(body: &[u8]) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = Vec::new();
    for line in body.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let mut out = Vec::with_capacity(line.len());
        let mut space = false;
        for &b in line {
            if b == b' ' || b == b'\t' {
                space = true;
            } else {
                if space {
                    out.push(b' ');
                }
                space = false;
                out.push(b);
            }
        }
        lines.push(out);
    }
    while lines.last().is_some_and(Vec::is_empty) {
        lines.pop();
    }
    let mut out = Vec::with_capacity(body.len());
    for line in lines {
        out.extend_from_slice(&line);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{RSA_PKCS1_2048_8192_SHA256, UnparsedPublicKey};

    /// A 2048-bit test key made with `openssl genpkey -algorithm RSA -outform DER` (PKCS#1; test
    /// only).
    const KEY: &[u8] = include_bytes!("dkim-test-key.der");

    #[test]
    fn canonicalisation_follows_rfc_6376() {
        assert_eq!(relaxed_header("Subject", " Hello \r\n\t  world  "), "subject:Hello world");
        assert_eq!(relaxed_header("X-A", "   "), "x-a:");
        assert_eq!(relaxed_body(b"a  b \t\r\nc\r\n\r\n\r\n"), b"a b\r\nc\r\n");
        assert_eq!(relaxed_body(b""), b"");
        assert_eq!(relaxed_body(b"\r\n\r\n"), b"");
        // RFC 6376 3.4.5's example.
        assert_eq!(relaxed_body(b" C \r\nD \t E\r\n\r\n\r\n"), b" C\r\nD E\r\n");
    }

    #[test]
    fn a_signature_verifies_with_the_public_key_and_breaks_on_change() {
        let signer = Signer::new("example.org", "s2026", KEY).unwrap();
        let msg = b"From: News <news@example.org>\r\nTo: a@example.net\r\nSubject: Hi\r\n\
                    List-Unsubscribe: <https://x/p/unsubscribe/t>\r\nList-Unsubscribe-Post: List-Unsubscribe=One-Click\r\n\
                    \r\nHello  there \r\n\r\n";
        let signed = signer.sign(msg, Timestamp::from_unix_secs(1_800_000_000)).unwrap();
        let text = String::from_utf8(signed.clone()).unwrap();
        assert!(text.starts_with("DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=example.org; s=s2026;"));
        assert!(text.contains("h=from:to:subject:list-unsubscribe:list-unsubscribe-post:from;"), "{text}");
        assert!(text.lines().all(|l| l.len() <= 998));
        // Verify as a receiver would: rebuild the signed data with the b= value emptied.
        let (headers, body) = split(&signed);
        let sig_value = &headers[0].1;
        let b = sig_value.split("b=").last().unwrap().replace(['\r', '\n', '\t', ' '], "");
        let bh = B64.encode(ring::digest::digest(&ring::digest::SHA256, &relaxed_body(body)));
        assert!(sig_value.contains(&format!("bh={bh};")));
        let mut data = String::new();
        for name in ["from", "to", "subject", "list-unsubscribe", "list-unsubscribe-post"] {
            let (n, v) = headers.iter().rev().find(|(n, _)| n.eq_ignore_ascii_case(name)).unwrap();
            data.push_str(&relaxed_header(n, v));
            data.push_str("\r\n");
        }
        let emptied = &sig_value[..sig_value.rfind("b=").unwrap() + 2];
        data.push_str(&relaxed_header("DKIM-Signature", emptied));
        let public = RsaKeyPair::from_der(KEY).unwrap();
        let verifier = UnparsedPublicKey::new(&RSA_PKCS1_2048_8192_SHA256, public.public().as_ref());
        let sig = B64.decode(b).unwrap();
        verifier.verify(data.as_bytes(), &sig).expect("the signature verifies");
        assert!(verifier.verify(data.replace("Hi", "Ho").as_bytes(), &sig).is_err());
    }

    #[test]
    fn bad_keys_are_refused_and_records_are_written() {
        assert!(matches!(Signer::new("example.org", "s1", b"not a key"), Err(DkimError::BadKey(_))));
    }
}
