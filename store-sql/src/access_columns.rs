//! How roles and API-key scopes are spelled in the `roles` and `api_keys` tables, the same in
//! every SQL adapter: a kind and two text columns, empty when the scope has no domain or list.
//! Each adapter turns a [`Corrupt`] value into its own error once.

use courrier_core::access::model::{KeyScope, Role, RoleKind};
use courrier_core::kernel::{DomainName, ListName};

/// A stored value no record can be made of: what it should have been, and the value.
#[derive(Debug)]
pub struct Corrupt {
    pub what: &'static str,
    pub value: String,
}

fn corrupt(what: &'static str, value: &str) -> Corrupt {
    Corrupt { what, value: value.to_owned() }
}

/// A role's columns: kind, domain, list.
pub fn role_columns(role: &Role) -> (&'static str, String, String) {
    (
        role.kind().as_str(),
        role.domain().map(|d| d.as_str().to_owned()).unwrap_or_default(),
        role.list().map(|l| l.as_str().to_owned()).unwrap_or_default(),
    )
}

fn scope_names(domain: &str, list: &str) -> Result<(Option<DomainName>, Option<ListName>), Corrupt> {
    let d =
        (!domain.is_empty()).then(|| DomainName::parse(domain).map_err(|_| corrupt("domain", domain))).transpose()?;
    let l = (!list.is_empty()).then(|| ListName::parse(list).map_err(|_| corrupt("list", list))).transpose()?;
    Ok((d, l))
}

/// The role a `roles` row holds.
pub fn role(kind: &str, domain: &str, list: &str) -> Result<Role, Corrupt> {
    let (d, l) = scope_names(domain, list)?;
    let kind = RoleKind::parse(kind).ok_or_else(|| corrupt("role", kind))?;
    Role::new(kind, d, l).map_err(|e| corrupt("role scope", &e.to_string()))
}

/// The scope an `api_keys` row holds.
pub fn key_scope(kind: &str, domain: &str, list: &str) -> Result<KeyScope, Corrupt> {
    match (kind, scope_names(domain, list)?) {
        ("user", (None, None)) => Ok(KeyScope::User),
        ("domain", (Some(d), None)) => Ok(KeyScope::Domain(d)),
        ("list", (Some(d), Some(l))) => Ok(KeyScope::List(d, l)),
        _ => Err(corrupt("key scope", kind)),
    }
}
