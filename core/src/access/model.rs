//! The access context's types: permissions, roles and their scopes, users, API keys, sessions.

use crate::id_type;
use crate::kernel::{DomainName, EmailAddress, ListName, Timestamp};

id_type!(
    /// An account.
    UserId
);
id_type!(
    /// An API key.
    KeyId
);
id_type!(
    /// A granted role.
    RoleId
);
id_type!(
    /// An administrator session.
    SessionId
);

/// The five permissions of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Perm {
    Read,
    MembersWrite,
    Send,
    Moderate,
    Manage,
}

impl Perm {
    pub const ALL: [Perm; 5] = [Perm::Read, Perm::MembersWrite, Perm::Send, Perm::Moderate, Perm::Manage];

    pub fn as_str(self) -> &'static str {
        match self {
            Perm::Read => "read",
            Perm::MembersWrite => "members:write",
            Perm::Send => "send",
            Perm::Moderate => "moderate",
            Perm::Manage => "manage",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == s)
    }

    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

/// A set of permissions (a bit set: stored as an integer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct PermSet(u8);

impl PermSet {
    pub const NONE: PermSet = PermSet(0);
    pub const ALL: PermSet = PermSet(0b1_1111);
    pub const READ: PermSet = PermSet(Perm::Read.bit());

    pub fn of(perms: &[Perm]) -> Self {
        Self(perms.iter().fold(0, |bits, p| bits | p.bit()))
    }

    pub fn contains(self, p: Perm) -> bool {
        self.0 & p.bit() != 0
    }

    pub fn is_subset_of(self, other: PermSet) -> bool {
        self.0 & !other.0 == 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn union(self, other: PermSet) -> Self {
        Self(self.0 | other.0)
    }

    pub fn intersection(self, other: PermSet) -> Self {
        Self(self.0 & other.0)
    }

    pub fn iter(self) -> impl Iterator<Item = Perm> {
        Perm::ALL.into_iter().filter(move |p| self.contains(*p))
    }

    pub fn bits(self) -> i64 {
        i64::from(self.0)
    }

    pub fn from_bits(bits: i64) -> Self {
        Self((bits & 0b1_1111) as u8)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RoleKind {
    SiteAdmin,
    DomainAdmin,
    Owner,
    Moderator,
}

impl RoleKind {
    pub const ALL: [RoleKind; 4] = [RoleKind::SiteAdmin, RoleKind::DomainAdmin, RoleKind::Owner, RoleKind::Moderator];

    pub fn as_str(self) -> &'static str {
        match self {
            RoleKind::SiteAdmin => "site_admin",
            RoleKind::DomainAdmin => "domain_admin",
            RoleKind::Owner => "owner",
            RoleKind::Moderator => "moderator",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// A role with the scope it is held on. The constructor ties each kind to its kind of scope:
/// `site_admin` on the installation, `domain_admin` on a domain, `owner`/`moderator` on a list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Role {
    SiteAdmin,
    DomainAdmin(DomainName),
    Owner(DomainName, ListName),
    Moderator(DomainName, ListName),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RoleError {
    #[error("unknown role {0:?}: one of site_admin, domain_admin, owner, moderator")]
    UnknownKind(String),
    #[error("role {0} is held on {1}")]
    WrongScope(&'static str, &'static str),
}

impl Role {
    pub fn new(kind: RoleKind, domain: Option<DomainName>, list: Option<ListName>) -> Result<Self, RoleError> {
        match (kind, domain, list) {
            (RoleKind::SiteAdmin, None, None) => Ok(Role::SiteAdmin),
            (RoleKind::SiteAdmin, ..) => {
                Err(RoleError::WrongScope("site_admin", "the installation (no domain, no list)"))
            }
            (RoleKind::DomainAdmin, Some(d), None) => Ok(Role::DomainAdmin(d)),
            (RoleKind::DomainAdmin, ..) => Err(RoleError::WrongScope("domain_admin", "a domain (a domain, no list)")),
            (RoleKind::Owner, Some(d), Some(l)) => Ok(Role::Owner(d, l)),
            (RoleKind::Moderator, Some(d), Some(l)) => Ok(Role::Moderator(d, l)),
            (RoleKind::Owner, ..) => Err(RoleError::WrongScope("owner", "a list (a domain and a list)")),
            (RoleKind::Moderator, ..) => Err(RoleError::WrongScope("moderator", "a list (a domain and a list)")),
        }
    }

    pub fn kind(&self) -> RoleKind {
        match self {
            Role::SiteAdmin => RoleKind::SiteAdmin,
            Role::DomainAdmin(_) => RoleKind::DomainAdmin,
            Role::Owner(..) => RoleKind::Owner,
            Role::Moderator(..) => RoleKind::Moderator,
        }
    }

    pub fn domain(&self) -> Option<&DomainName> {
        match self {
            Role::SiteAdmin => None,
            Role::DomainAdmin(d) | Role::Owner(d, _) | Role::Moderator(d, _) => Some(d),
        }
    }

    pub fn list(&self) -> Option<&ListName> {
        match self {
            Role::Owner(_, l) | Role::Moderator(_, l) => Some(l),
            _ => None,
        }
    }

    /// What this role allows on `target`. Roles reach downwards (a domain's lists) and give
    /// sight upwards (an owner reads the domain that holds its list), never sideways.
    pub fn perms_on(&self, target: &Target) -> PermSet {
        let all = PermSet::ALL;
        let read = PermSet::READ;
        let read_moderate = PermSet::of(&[Perm::Read, Perm::Moderate]);
        match (self, target) {
            (Role::SiteAdmin, _) => all,
            (Role::DomainAdmin(d), Target::Domain(td)) if d == *td => all,
            (Role::DomainAdmin(d), Target::List(td, _)) if d == *td => all,
            (Role::Owner(d, l), Target::List(td, tl)) if d == *td && l == *tl => all,
            (Role::Moderator(d, l), Target::List(td, tl)) if d == *td && l == *tl => read_moderate,
            (Role::Owner(d, _) | Role::Moderator(d, _), Target::Domain(td)) if d == *td => read,
            _ => PermSet::NONE,
        }
    }
}

/// What an operation acts on, for authorisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// The installation's administration: users, roles, API keys, the audit log.
    Installation,
    Domain(&'a DomainName),
    List(&'a DomainName, &'a ListName),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserStatus {
    Active,
    Disabled,
}

impl UserStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            UserStatus::Active => "active",
            UserStatus::Disabled => "disabled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [UserStatus::Active, UserStatus::Disabled].into_iter().find(|u| u.as_str() == s)
    }
}

/// Optional profile fields (the OCR service shows them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Profile {
    pub firstname: Option<String>,
    pub name: Option<String>,
    pub mobile: Option<String>,
    pub language_code_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: UserId,
    pub email: EmailAddress,
    pub profile: Profile,
    pub status: UserStatus,
    pub has_password: bool,
    pub email_verified_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A user as authentication needs it: the record and its password hash.
#[derive(Debug, Clone)]
pub struct UserWithSecret {
    pub user: User,
    pub password_hash: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleGrant {
    pub id: RoleId,
    pub user_id: UserId,
    pub role: Role,
    pub granted_at: Timestamp,
}

/// Where an API key may act: its user's whole reach, one domain, or one list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyScope {
    User,
    Domain(DomainName),
    List(DomainName, ListName),
}

impl KeyScope {
    pub fn kind_str(&self) -> &'static str {
        match self {
            KeyScope::User => "user",
            KeyScope::Domain(_) => "domain",
            KeyScope::List(..) => "list",
        }
    }

    /// Whether `target` lies inside this scope. Installation administration needs a user-scoped
    /// key: a key handed to one domain's tooling cannot manage accounts.
    pub fn covers(&self, target: &Target) -> bool {
        match (self, target) {
            (KeyScope::User, _) => true,
            (KeyScope::Domain(d), Target::Domain(td) | Target::List(td, _)) => d == *td,
            (KeyScope::List(d, _), Target::Domain(td)) => d == *td,
            (KeyScope::List(d, l), Target::List(td, tl)) => d == *td && l == *tl,
            (KeyScope::Domain(_) | KeyScope::List(..), Target::Installation) => false,
        }
    }

    /// The target that stands for the whole scope, for checks at key creation.
    pub fn as_target(&self) -> Option<Target<'_>> {
        match self {
            KeyScope::User => None,
            KeyScope::Domain(d) => Some(Target::Domain(d)),
            KeyScope::List(d, l) => Some(Target::List(d, l)),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKey {
    pub id: KeyId,
    pub user_id: UserId,
    pub name: String,
    pub prefix: String,
    pub scope: KeyScope,
    pub perms: PermSet,
    pub rate_limit_per_min: u32,
    pub expires_at: Option<Timestamp>,
    pub created_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub id: SessionId,
    pub user_id: UserId,
    pub created_at: Timestamp,
    pub last_seen_at: Timestamp,
    pub expires_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> DomainName {
        DomainName::parse(s).unwrap()
    }
    fn l(s: &str) -> ListName {
        ListName::parse(s).unwrap()
    }

    #[test]
    fn roles_reach_down_and_see_up_never_sideways() {
        let (ex, other) = (d("example.org"), d("other.org"));
        let (news, jobs) = (l("news"), l("jobs"));
        let owner = Role::Owner(ex.clone(), news.clone());
        assert_eq!(owner.perms_on(&Target::List(&ex, &news)), PermSet::ALL);
        assert_eq!(owner.perms_on(&Target::Domain(&ex)), PermSet::READ);
        assert_eq!(owner.perms_on(&Target::List(&ex, &jobs)), PermSet::NONE);
        assert_eq!(owner.perms_on(&Target::List(&other, &news)), PermSet::NONE);
        assert_eq!(owner.perms_on(&Target::Installation), PermSet::NONE);
        let moderator = Role::Moderator(ex.clone(), news.clone());
        assert_eq!(moderator.perms_on(&Target::List(&ex, &news)), PermSet::of(&[Perm::Read, Perm::Moderate]));
        let admin = Role::DomainAdmin(ex.clone());
        assert_eq!(admin.perms_on(&Target::List(&ex, &jobs)), PermSet::ALL);
        assert_eq!(admin.perms_on(&Target::Domain(&other)), PermSet::NONE);
        assert_eq!(admin.perms_on(&Target::Installation), PermSet::NONE);
        assert_eq!(Role::SiteAdmin.perms_on(&Target::Installation), PermSet::ALL);
    }

    #[test]
    fn roles_are_tied_to_their_kind_of_scope() {
        assert!(Role::new(RoleKind::SiteAdmin, Some(d("a.org")), None).is_err());
        assert!(Role::new(RoleKind::DomainAdmin, None, None).is_err());
        assert!(Role::new(RoleKind::DomainAdmin, Some(d("a.org")), Some(l("x"))).is_err());
        assert!(Role::new(RoleKind::Owner, Some(d("a.org")), None).is_err());
        assert_eq!(
            Role::new(RoleKind::Moderator, Some(d("a.org")), Some(l("x"))),
            Ok(Role::Moderator(d("a.org"), l("x")))
        );
    }

    #[test]
    fn key_scopes_cover_their_subtree_only() {
        let (ex, other, news, jobs) = (d("example.org"), d("other.org"), l("news"), l("jobs"));
        let list_key = KeyScope::List(ex.clone(), news.clone());
        assert!(list_key.covers(&Target::List(&ex, &news)));
        assert!(list_key.covers(&Target::Domain(&ex)), "to list the domain's lists, seeing only its own");
        assert!(!list_key.covers(&Target::List(&ex, &jobs)));
        assert!(!list_key.covers(&Target::Installation));
        let domain_key = KeyScope::Domain(ex.clone());
        assert!(domain_key.covers(&Target::List(&ex, &jobs)));
        assert!(!domain_key.covers(&Target::Domain(&other)));
        assert!(KeyScope::User.covers(&Target::Installation));
    }

    #[test]
    fn perm_sets() {
        let rw = PermSet::of(&[Perm::Read, Perm::Manage]);
        assert!(rw.contains(Perm::Manage) && !rw.contains(Perm::Send));
        assert!(PermSet::READ.is_subset_of(rw) && !rw.is_subset_of(PermSet::READ));
        assert_eq!(PermSet::from_bits(rw.bits()), rw);
        assert_eq!(rw.iter().map(Perm::as_str).collect::<Vec<_>>(), ["read", "manage"]);
        for p in Perm::ALL {
            assert_eq!(Perm::parse(p.as_str()), Some(p));
        }
    }
}
