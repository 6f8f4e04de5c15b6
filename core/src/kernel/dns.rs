//! The DNS port: what the egress guard resolves and what the domain DNS check reads. The adapter
//! (`adapters::dns`) wraps hickory-resolver; rules never resolve through the OS themselves.

use std::net::IpAddr;

/// A lookup that did not produce an answer. An absent name or record is not an error: lookups
/// answer it as an empty list, so a caller can tell "no such record" from "could not ask".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DnsError(pub String);

pub trait Dns: Send + Sync {
    /// The A and AAAA addresses of `name` (empty when it has none or does not exist).
    fn lookup_ip(&self, name: &str) -> Result<Vec<IpAddr>, DnsError>;
    /// The TXT records of `name`, each one's character-strings joined (empty when none).
    fn lookup_txt(&self, name: &str) -> Result<Vec<String>, DnsError>;
}

/// A resolver that answers from a fixed table, for tests of rules; a name may answer differently
/// on each call (the last answer repeats), which is how a DNS rebinding is played.
#[cfg(any(test, feature = "testing"))]
#[derive(Default)]
pub struct TableDns {
    pub ip: std::sync::Mutex<std::collections::HashMap<String, std::collections::VecDeque<Vec<IpAddr>>>>,
    pub txt: std::sync::Mutex<std::collections::HashMap<String, Result<Vec<String>, DnsError>>>,
}

#[cfg(any(test, feature = "testing"))]
impl TableDns {
    pub fn with_ip(self, name: &str, answers: &[&[&str]]) -> Self {
        let parsed = answers.iter().map(|a| a.iter().map(|s| s.parse().expect("an IP address")).collect()).collect();
        self.ip.lock().expect("poisoned").insert(name.to_owned(), parsed);
        self
    }
}

#[cfg(any(test, feature = "testing"))]
impl Dns for TableDns {
    fn lookup_ip(&self, name: &str) -> Result<Vec<IpAddr>, DnsError> {
        let mut table = self.ip.lock().expect("poisoned");
        let Some(answers) = table.get_mut(name) else { return Ok(Vec::new()) };
        if answers.len() > 1 { Ok(answers.pop_front().unwrap_or_default()) } else { Ok(answers[0].clone()) }
    }

    fn lookup_txt(&self, name: &str) -> Result<Vec<String>, DnsError> {
        self.txt.lock().expect("poisoned").get(name).cloned().unwrap_or(Ok(Vec::new()))
    }
}
