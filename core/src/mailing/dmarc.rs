//! DMARC mitigation of posts: a copy of a post goes out from the list's servers, signed by the
//! list's domain, with the poster's `From`. When the poster's domain publishes `p=reject` or
//! `p=quarantine`, receivers would refuse or bin it (the poster's domain neither signed it nor
//! sent it), so `From` becomes the list (`"Ann via News" <news@example.org>`) with the poster in
//! `Reply-To` (`compose::FromHandling::Munge`). The poster's policy is read through the DNS port
//! (`_dmarc.<domain>`, then its organisational domain's `sp=`/`p=`) and cached for an hour (a
//! failed lookup for five minutes, and it leaves `From` as it is: a copy is not held back for it).

use super::compose::FromHandling;
use super::model::{DmarcMitigation, MailingList};
use crate::kernel::{Dns, Timestamp};
use std::collections::HashMap;
use std::sync::Mutex;

/// How long a looked-up policy is trusted.
const TTL_SECS: i64 = 3600;
/// How long a failed lookup is remembered (so a dead resolver is not asked for every copy).
const FAILED_TTL_SECS: i64 = 300;
/// Entries kept at most (an entry is a domain name and a few bytes).
const MAX_ENTRIES: usize = 10_000;

/// A domain's published DMARC policy, as far as mitigation cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// No record, `p=none`, or a record that does not parse.
    None,
    Quarantine,
    Reject,
    /// The lookup failed (time-out, server failure): unknown for a few minutes.
    Unknown,
}

/// Reads `v=DMARC1; p=...; sp=...` and returns `p` (or `sp` when `subdomain` and it is given).
pub fn parse_record(record: &str, subdomain: bool) -> Option<Policy> {
    let mut tags = record.split(';').map(|t| t.trim()).filter(|t| !t.is_empty());
    if !tags.next()?.eq_ignore_ascii_case("v=DMARC1") {
        return None;
    }
    let (mut p, mut sp) = (None, None);
    for tag in tags {
        let Some((k, v)) = tag.split_once('=') else { continue };
        let policy = match v.trim().to_ascii_lowercase().as_str() {
            "reject" => Policy::Reject,
            "quarantine" => Policy::Quarantine,
            _ => Policy::None,
        };
        match k.trim().to_ascii_lowercase().as_str() {
            "p" => p = Some(policy),
            "sp" => sp = Some(policy),
            _ => {}
        }
    }
    if subdomain { sp.or(p) } else { p }
}

/// The organisational domain, approximated as the last two labels (no public suffix list here:
/// for `example.co.uk` this asks `_dmarc.co.uk`, which publishes nothing, so the answer is the
/// domain's own record or none).
fn organisational(domain: &str) -> Option<&str> {
    let mut dots = domain.rmatch_indices('.');
    dots.next()?;
    Some(dots.next().map_or(domain, |(i, _)| &domain[i + 1..]))
}

/// The policy cache of one process.
#[derive(Debug, Default)]
pub struct Cache {
    entries: Mutex<HashMap<String, (Policy, Timestamp)>>,
}

impl Cache {
    /// The domain's policy, from the cache or the DNS.
    pub fn policy(&self, dns: &dyn Dns, domain: &str, now: Timestamp) -> Policy {
        let domain = domain.trim_end_matches('.').to_ascii_lowercase();
        if let Ok(entries) = self.entries.lock()
            && let Some((found, until)) = entries.get(&domain)
            && *until > now
        {
            return *found;
        }
        let found = lookup(dns, &domain).unwrap_or(Policy::Unknown);
        let ttl = if found == Policy::Unknown { FAILED_TTL_SECS } else { TTL_SECS };
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= MAX_ENTRIES {
                entries.retain(|_, (_, until)| *until > now);
                if entries.len() >= MAX_ENTRIES {
                    entries.clear();
                }
            }
            entries.insert(domain, (found, now.plus_secs(ttl)));
        }
        found
    }
}

fn lookup(dns: &dyn Dns, domain: &str) -> Result<Policy, crate::kernel::DnsError> {
    let ask = |name: &str, subdomain: bool| -> Result<Option<Policy>, crate::kernel::DnsError> {
        let records = dns.lookup_txt(&format!("_dmarc.{name}")).inspect_err(|e| {
            tracing::info!(domain = name, error = %e, "DMARC lookup failed");
        })?;
        Ok(records.iter().find_map(|r| parse_record(r, subdomain)))
    };
    if let Some(p) = ask(domain, false)? {
        return Ok(p);
    }
    match organisational(domain) {
        Some(org) if org != domain => Ok(ask(org, true)?.unwrap_or(Policy::None)),
        _ => Ok(Policy::None),
    }
}

/// What a post's copies do with its `From`: munged when the list mitigates and the poster's
/// domain publishes `reject` or `quarantine`.
pub fn from_handling(
    cache: &Cache,
    dns: &dyn Dns,
    list: &MailingList,
    poster_domain: Option<&str>,
    now: Timestamp,
) -> FromHandling {
    let Some(domain) = poster_domain else { return FromHandling::Keep };
    if list.policies.dmarc_mitigation == DmarcMitigation::None {
        return FromHandling::Keep;
    }
    match cache.policy(dns, domain, now) {
        Policy::Reject | Policy::Quarantine => FromHandling::Munge,
        Policy::None | Policy::Unknown => FromHandling::Keep,
    }
}

/// Whether a post's `From` may stand for its address when the posting policy asks who the
/// poster is (member, owner). The domain's owner says, through DMARC (RFC 7489), whether mail
/// claiming its addresses must be authenticated; when it publishes `p=reject` or
/// `p=quarantine`, the post must carry a DKIM signature that verifies, by the `From` domain or
/// one sharing its organisational domain (relaxed alignment, DMARC's default). SPF is not
/// judged here: over LMTP the client is the installation's own MTA, not the poster's server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FromCheck {
    /// Taken as written: the domain asks for nothing (no record, `p=none`), or its policy could
    /// not be read (a resolver outage must not send every post to moderation), or the post has
    /// no `From` domain. What every list server does with every post.
    #[default]
    AsWritten,
    /// An aligned DKIM signature verifies: the domain vouches for the message.
    Aligned,
    /// The domain requires authentication and nothing aligned verifies: a forgery as far as the
    /// domain's owner is concerned. The poster counts as nobody (a `members` list holds the
    /// post as `not_member` for a moderator, who still sees it).
    Unaligned,
}

/// Checks `raw`'s `From` domain against its DMARC policy (cached) and, when enforced, its DKIM
/// signatures (through the verifying port).
pub fn check_from(
    cache: &Cache,
    dns: &dyn Dns,
    verifier: &dyn super::dkim::DkimVerifying,
    from_domain: Option<&str>,
    raw: &[u8],
    now: Timestamp,
) -> FromCheck {
    let Some(domain) = from_domain.map(|d| d.trim_end_matches('.').to_ascii_lowercase()) else {
        return FromCheck::AsWritten;
    };
    match cache.policy(dns, &domain, now) {
        Policy::None | Policy::Unknown => return FromCheck::AsWritten,
        Policy::Reject | Policy::Quarantine => {}
    }
    let verified = verifier.verified_domains(raw, dns);
    if verified.iter().any(|d| aligned(d, &domain)) {
        FromCheck::Aligned
    } else {
        tracing::info!(domain, signed_by = ?verified, "a post's From is not authenticated by its domain's DMARC policy");
        FromCheck::Unaligned
    }
}

/// Relaxed identifier alignment: the same organisational domain (approximated as for the
/// policy lookup above).
fn aligned(signer: &str, from: &str) -> bool {
    let signer = signer.trim_end_matches('.').to_ascii_lowercase();
    signer == from || organisational(&signer).is_some_and(|o| Some(o) == organisational(from))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{DnsError, TableDns};

    fn txt(dns: TableDns, name: &str, records: Result<Vec<&str>, &str>) -> TableDns {
        let value = records.map(|r| r.iter().map(|s| (*s).to_owned()).collect()).map_err(|e| DnsError(e.into()));
        dns.txt.lock().unwrap().insert(name.to_owned(), value);
        dns
    }

    #[test]
    fn records_are_read_as_receivers_read_them() {
        assert_eq!(parse_record("v=DMARC1; p=reject; rua=mailto:x@y", false), Some(Policy::Reject));
        assert_eq!(parse_record("v=DMARC1;p=quarantine", false), Some(Policy::Quarantine));
        assert_eq!(parse_record("v=DMARC1; p=none", false), Some(Policy::None));
        assert_eq!(parse_record("v=DMARC1; p=reject; sp=none", true), Some(Policy::None));
        assert_eq!(parse_record("v=DMARC1; p=reject", true), Some(Policy::Reject));
        assert_eq!(parse_record("v=spf1 -all", false), None);
        assert_eq!(organisational("a.b.example.com"), Some("example.com"));
        assert_eq!(organisational("example.com"), Some("example.com"));
        assert_eq!(organisational("com"), None);
    }

    #[test]
    fn the_policy_is_looked_up_once_then_cached_and_subdomains_fall_back() {
        let dns = txt(TableDns::default(), "_dmarc.strict.test", Ok(vec!["v=DMARC1; p=reject; sp=quarantine"]));
        let dns = txt(dns, "_dmarc.broken.test", Err("timeout"));
        let cache = Cache::default();
        let t = Timestamp::from_unix_secs(1_800_000_000);
        assert_eq!(cache.policy(&dns, "strict.test", t), Policy::Reject);
        assert_eq!(cache.policy(&dns, "mail.strict.test", t), Policy::Quarantine);
        assert_eq!(cache.policy(&dns, "open.test", t), Policy::None);
        assert_eq!(cache.policy(&dns, "broken.test", t), Policy::Unknown);
        // The record changes: the cache answers the old policy until its hour is over.
        let dns = txt(dns, "_dmarc.strict.test", Ok(vec!["v=DMARC1; p=none"]));
        assert_eq!(cache.policy(&dns, "Strict.Test", t.plus_secs(60)), Policy::Reject);
        assert_eq!(cache.policy(&dns, "strict.test", t.plus_secs(TTL_SECS + 1)), Policy::None);
    }
    /// Says which domains signed, whatever the message (a test of the rule, not of DKIM).
    struct Signed(Vec<&'static str>);

    impl crate::mailing::dkim::DkimVerifying for Signed {
        fn verified_domains(&self, _: &[u8], _: &dyn Dns) -> Vec<String> {
            self.0.iter().map(|d| (*d).to_owned()).collect()
        }
    }

    #[test]
    fn a_from_counts_as_written_unless_its_domain_enforces_dmarc_and_nothing_aligned_verifies() {
        let dns = txt(TableDns::default(), "_dmarc.strict.test", Ok(vec!["v=DMARC1; p=reject"]));
        let dns = txt(dns, "_dmarc.quiet.test", Ok(vec!["v=DMARC1; p=quarantine"]));
        let dns = txt(dns, "_dmarc.open.test", Ok(vec!["v=DMARC1; p=none"]));
        let dns = txt(dns, "_dmarc.broken.test", Err("timeout"));
        let t = Timestamp::from_unix_secs(1_800_000_000);
        let check = |domain: &str, signed: Vec<&'static str>| {
            check_from(&Cache::default(), &dns, &Signed(signed), Some(domain), b"", t)
        };
        assert_eq!(check("open.test", vec![]), FromCheck::AsWritten, "p=none asks for nothing");
        assert_eq!(check("nowhere.test", vec![]), FromCheck::AsWritten, "no record");
        assert_eq!(check("broken.test", vec![]), FromCheck::AsWritten, "an outage holds nobody's post");
        assert_eq!(check("strict.test", vec![]), FromCheck::Unaligned, "unsigned");
        assert_eq!(check("quiet.test", vec!["other.test"]), FromCheck::Unaligned, "signed by someone else");
        assert_eq!(check("strict.test", vec!["strict.test"]), FromCheck::Aligned);
        assert_eq!(check("Strict.Test.", vec!["STRICT.test"]), FromCheck::Aligned, "names compare as DNS names");
        assert_eq!(check("strict.test", vec!["mail.strict.test"]), FromCheck::Aligned, "relaxed: same organisation");
        assert_eq!(check("lists.strict.test", vec!["strict.test"]), FromCheck::Aligned, "a subdomain's From");
        assert_eq!(check("strict.test", vec!["x.test", "strict.test"]), FromCheck::Aligned, "any one aligned");
        assert_eq!(check_from(&Cache::default(), &dns, &Signed(vec![]), None, b"", t), FromCheck::AsWritten);
    }
}
