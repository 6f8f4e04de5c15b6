//! DKIM signatures of list messages (RFC 6376: `rsa-sha256`, `relaxed/relaxed`), with the
//! domain's key. The headers receivers judge a list by are signed, `List-Unsubscribe` and
//! `List-Unsubscribe-Post` among them (RFC 8058 requires it, and so do Gmail's and Yahoo's bulk
//! sender rules). Keys are made by the key port (`DkimKeyMaker`) and kept sealed with the
//! installation's data key; this module reads them and hands them to the signing port
//! (`DkimSigning`, mail-auth in `adapters/mail_auth_dkim.rs`), once per domain and round.

/// The headers signed: every occurrence of each when present, and each signed as absent when not
/// (mail-auth lists the missing names in `h=` too, so adding one in transit breaks the
/// signature). `From` is listed twice ("oversigned") so that no second `From` can be added
/// without breaking it.
pub const SIGNED: &[&str] = &[
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
    "from",
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

/// Signs copies with a domain's key (RFC 6376: `rsa-sha256`, `relaxed/relaxed`, the [`SIGNED`]
/// headers). A port: the adapter is mail-auth's DKIM signer.
pub trait DkimSigning: Send + Sync {
    /// `private_der` (PKCS#8 or PKCS#1 DER) opened as the key of `domain`'s `selector`, ready to
    /// sign many copies: done once per domain and delivery round, not per copy.
    fn open(&self, domain: &str, selector: &str, private_der: &[u8]) -> Result<Box<dyn CopySigner>, DkimError>;
}

/// Verifies the DKIM signatures of a received message (RFC 6376). A port: the adapter is
/// mail-auth's verifier, and the signers' public keys are read through the DNS port it is given
/// (never by a resolver of the library's own), so the tests' DNS server and the installation's
/// resolver settings hold for it as for every other lookup.
pub trait DkimVerifying: Send + Sync {
    /// The signing domains (`d=`, lower-cased) of the signatures of `raw` that verify: body hash,
    /// signed headers and the key published at `<s>._domainkey.<d>`. Empty when none does (no
    /// signature, a broken one, a key that cannot be read).
    fn verified_domains(&self, raw: &[u8], dns: &dyn crate::kernel::Dns) -> Vec<String>;
}

/// One domain's opened key.
pub trait CopySigner: Send + Sync {
    /// The `DKIM-Signature` header field of `message` (CRLF line ends, CRLF-ended), to go first.
    fn signature(&self, message: &[u8]) -> Result<Vec<u8>, DkimError>;
}

/// A domain's signing key, opened once and used for every copy.
pub struct Signer {
    domain: String,
    key: Box<dyn CopySigner>,
}

impl Signer {
    /// The message with its `DKIM-Signature` header first.
    pub fn sign(&self, message: &[u8]) -> Result<Vec<u8>, DkimError> {
        let mut out = self.key.signature(message)?;
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
        .and_then(|der| app.dkim_signing.open(d.name.as_str(), selector, &der).map_err(|e| e.to_string()));
    match opened {
        Ok(key) => Ok(Some(Signer { domain: d.name.as_str().to_owned(), key })),
        Err(why) => {
            tracing::error!(domain = %d.name, reason = %why, "the DKIM key cannot be used; mail goes unsigned");
            Ok(None)
        }
    }
}

/// Signs the message in place when there is a signer.
pub(crate) fn sign_message(signer: Option<&Signer>, message: &mut crate::kernel::OutgoingMessage) {
    if let Some(s) = signer {
        match s.sign(&message.data) {
            Ok(signed) => message.data = signed,
            Err(e) => tracing::error!(domain = %s.domain, error = %e, "DKIM signing failed; the copy goes unsigned"),
        }
    }
}
