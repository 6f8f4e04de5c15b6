//! The domain DNS check: SPF, the DKIM selector's key record and `_dmarc`, read through the DNS
//! port; one verdict per record, the overall verdict stored on the domain (`dns_ok`,
//! `dns_checked_at`) before it is returned. Authorised like other domain changes (404 out of
//! reach, 403 without `manage`, both audited), rate limited per domain and per caller, and
//! bounded in time: each lookup by the adapter (time-out x attempts), the whole check by a budget
//! after which the remaining records are reported as not looked up.

use super::MailingError;
use super::Service;
use super::domains;
use super::model::Domain;
use crate::access::principal::{RequestCtx, audit_done};
use crate::access::{Perm, Principal};
use crate::kernel::{DomainName, Timestamp};
use crate::storage::in_write;

/// Checks of one domain per minute, whoever asks (each costs three lookups to its zone).
pub const PER_DOMAIN_PER_MINUTE: usize = 6;
/// Checks per minute by one caller (user, or key for keys), over every domain.
pub const PER_CALLER_PER_MINUTE: usize = 20;
/// The whole check's time budget: lookups not started by then are reported as errors, so a check
/// takes at most this plus one lookup (1.5 s x 2 attempts): about 8 s.
pub const BUDGET_SECS: i64 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    Spf,
    Dkim,
    Dmarc,
}

impl RecordKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordKind::Spf => "spf",
            RecordKind::Dkim => "dkim",
            RecordKind::Dmarc => "dmarc",
        }
    }
}

/// One record's verdict. `checked: false` means it did not apply (DKIM without a selector): not
/// a failure. `error` is set only when resolution itself failed (an unreachable or refusing
/// server), which is how it differs from an absent record (`found: false`, no error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub kind: RecordKind,
    pub name: String,
    pub checked: bool,
    pub found: bool,
    pub expected: String,
    /// The records read at that name that look like this kind's (for the operator to compare).
    pub values: Vec<String>,
    pub error: Option<String>,
}

impl Verdict {
    fn passes(&self) -> bool {
        !self.checked || (self.found && self.error.is_none())
    }
}

#[derive(Debug, Clone)]
pub struct DnsCheck {
    pub domain: Domain,
    pub records: Vec<Verdict>,
}

fn starts_with_tag(record: &str, tag: &str) -> bool {
    // Bytes, not string slices: a record is whatever a DNS server sent, multi-byte text included.
    let r = record.trim_start().as_bytes();
    r.len() >= tag.len()
        && r[..tag.len()].eq_ignore_ascii_case(tag.as_bytes())
        && r.get(tag.len()).is_none_or(|c| *c == b' ' || *c == b';')
}

/// Reads one record kind's TXT answer into its verdict.
fn judge(kind: RecordKind, name: String, answer: Result<Vec<String>, String>) -> Verdict {
    let expected = match kind {
        RecordKind::Spf => "exactly one TXT record starting with \"v=spf1\"",
        RecordKind::Dkim => "a TXT record \"v=DKIM1; k=rsa; p=<public key>\" with a non-empty p=",
        RecordKind::Dmarc => "exactly one TXT record starting with \"v=DMARC1\" with a p= policy",
    }
    .to_owned();
    let records = match answer {
        Ok(r) => r,
        Err(e) => {
            return Verdict { kind, name, checked: true, found: false, expected, values: Vec::new(), error: Some(e) };
        }
    };
    let values: Vec<String> = match kind {
        RecordKind::Spf => records.into_iter().filter(|r| starts_with_tag(r, "v=spf1")).collect(),
        RecordKind::Dmarc => records.into_iter().filter(|r| starts_with_tag(r, "v=DMARC1")).collect(),
        RecordKind::Dkim => records
            .into_iter()
            .filter(|r| starts_with_tag(r, "v=DKIM1") || r.split(';').any(|t| t.trim_start().starts_with("p=")))
            .collect(),
    };
    let tag_value = |record: &str, tag: &str| {
        record.split(';').map(str::trim).find_map(|t| t.strip_prefix(tag)).map(str::trim).map(str::to_owned)
    };
    let found = match kind {
        // RFC 7208 4.5: more than one SPF record is a permanent error.
        RecordKind::Spf => values.len() == 1,
        RecordKind::Dmarc => values.len() == 1 && tag_value(&values[0], "p=").is_some_and(|p| !p.is_empty()),
        // An empty p= is a revoked key (RFC 6376 3.6.1).
        RecordKind::Dkim => values.iter().any(|r| tag_value(r, "p=").is_some_and(|p| !p.is_empty())),
    };
    Verdict { kind, name, checked: true, found, expected, values, error: None }
}

/// When the service holds the selector's key, the published record must carry that key: another
/// key (an old one, a typo) would make every signature fail at the receivers.
fn ours(mut v: Verdict, key: &str) -> Verdict {
    v.expected = format!("v=DKIM1; k=rsa; p={key}");
    if v.error.is_none() {
        v.found = v.values.iter().any(|r| {
            r.split(';')
                .map(str::trim)
                .find_map(|t| t.strip_prefix("p="))
                .is_some_and(|p| p.chars().filter(|c| !c.is_whitespace()).eq(key.chars()))
        });
    }
    v
}

/// Runs the check, stores the verdict on the domain, and returns it.
pub fn run(app: &Service, p: &Principal, ctx: &RequestCtx, name: &DomainName) -> Result<DnsCheck, MailingError> {
    let domain = domains::authorized(app, p, ctx, Perm::Manage, name, "domain.dns_check")?;
    let now = app.clock.now();
    let caller = match (p.actor().key_id, p.actor().user_id) {
        (Some(k), _) => format!("key:{k}"),
        (None, Some(u)) => format!("user:{u}"),
        (None, None) => "operator".to_owned(),
    };
    // The operator (the CLI) is not limited: it has the machine already.
    if caller != "operator" {
        let limiter = &app.access.limiter;
        limiter.take_window(&format!("dns-check:domain:{name}"), PER_DOMAIN_PER_MINUTE, 60, now)?;
        limiter.take_window(&format!("dns-check:{caller}"), PER_CALLER_PER_MINUTE, 60, now)?;
    }
    let deadline = now.plus_secs(BUDGET_SECS);
    let lookup = |qname: &str| -> Result<Vec<String>, String> {
        if app.clock.now() >= deadline {
            return Err(format!("not looked up: the check's {BUDGET_SECS} s budget ran out"));
        }
        app.egress.dns.lookup_txt(qname).map_err(|e| e.0)
    };
    let mut records = vec![judge(RecordKind::Spf, name.to_string(), lookup(name.as_str()))];
    records.push(match &domain.dkim_selector {
        Some(sel) => {
            let qname = format!("{sel}._domainkey.{name}");
            let answer = lookup(&qname);
            let verdict = judge(RecordKind::Dkim, qname, answer);
            match &domain.dkim_public_key {
                Some((made_for, key)) if made_for == sel => ours(verdict, key),
                _ => verdict,
            }
        }
        None => Verdict {
            kind: RecordKind::Dkim,
            name: format!("<selector>._domainkey.{name}"),
            checked: false,
            found: false,
            expected: "a DKIM selector set on the domain (dkim_selector), then its key record".into(),
            values: Vec::new(),
            error: None,
        },
    });
    let dmarc = format!("_dmarc.{name}");
    records.push(judge(RecordKind::Dmarc, dmarc.clone(), lookup(&dmarc)));
    let ok = records.iter().all(Verdict::passes);
    let checked_at = app.clock.now();
    let domain = store_verdict(app, p, ctx, name, ok, checked_at)?;
    Ok(DnsCheck { domain, records })
}

fn store_verdict(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    name: &DomainName,
    ok: bool,
    at: Timestamp,
) -> Result<Domain, MailingError> {
    in_write(&*app.store, |tx| {
        let mut d = tx.domain_by_name(name)?.ok_or(MailingError::NotFound("domain"))?;
        d.dns_ok = Some(ok);
        d.dns_checked_at = Some(at);
        d.updated_at = at;
        tx.update_domain(&d)?;
        audit_done(tx, p, ctx, at, "domain.dns_check", &format!("domain:{name}"))?;
        Ok::<_, MailingError>(d)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(kind: RecordKind, answer: Result<Vec<&str>, &str>) -> (bool, Option<String>) {
        let v =
            judge(kind, "x".into(), answer.map(|r| r.into_iter().map(str::to_owned).collect()).map_err(str::to_owned));
        (v.found, v.error)
    }

    #[test]
    fn verdicts_tell_found_absent_malformed_and_unreachable_apart() {
        assert_eq!(check(RecordKind::Spf, Ok(vec!["v=spf1 mx -all", "google-site=x"])), (true, None));
        assert_eq!(check(RecordKind::Spf, Ok(vec!["V=SPF1 -all"])), (true, None));
        assert_eq!(
            check(RecordKind::Spf, Ok(vec!["v=spé1 -all", "é", "v=spf1\u{e9}"])),
            (false, None),
            "no panic on UTF-8"
        );
        assert_eq!(check(RecordKind::Spf, Ok(vec![])), (false, None));
        assert_eq!(check(RecordKind::Spf, Ok(vec!["v=spf10 -all"])), (false, None));
        assert_eq!(
            check(RecordKind::Spf, Ok(vec!["v=spf1 a -all", "v=spf1 mx -all"])),
            (false, None),
            "two is an error"
        );
        assert_eq!(check(RecordKind::Spf, Err("connection refused")), (false, Some("connection refused".into())));
        assert_eq!(check(RecordKind::Dmarc, Ok(vec!["v=DMARC1; p=reject; rua=mailto:d@x"])), (true, None));
        assert_eq!(check(RecordKind::Dmarc, Ok(vec!["v=DMARC1; rua=mailto:d@x"])), (false, None), "no policy");
        assert_eq!(check(RecordKind::Dkim, Ok(vec!["v=DKIM1; k=rsa; p=MIIBIjANBg"])), (true, None));
        assert_eq!(check(RecordKind::Dkim, Ok(vec!["v=DKIM1; k=rsa; p="])), (false, None), "revoked");
    }

    #[test]
    fn the_services_own_key_must_be_the_one_published() {
        let at = |records: Vec<&str>| {
            let records = Ok(records.into_iter().map(str::to_owned).collect());
            ours(judge(RecordKind::Dkim, "s._domainkey.example.org".into(), records), "MIIBOURS")
        };
        let good = at(vec!["v=DKIM1; k=rsa; p=MIIB OURS"]);
        assert!(good.found && good.expected.ends_with("p=MIIBOURS"), "{good:?}");
        assert!(!at(vec!["v=DKIM1; k=rsa; p=MIIBOLD"]).found, "another key fails");
        let unreachable = ours(judge(RecordKind::Dkim, "x".into(), Err("timed out".into())), "MIIBOURS");
        assert_eq!((unreachable.found, unreachable.error.as_deref()), (false, Some("timed out")));
    }
}
