//! The access context's store suite: every storage adapter runs it on its implementation of
//! [`super::ports::Tx`] (with the kernel's `crate::storage::suite`).

use super::model::{ApiKey, KeyId, KeyScope, Perm, PermSet, Profile, Role, UserId, UserStatus};
use super::ports::{Store, UserVisibility};
use crate::kernel::{DomainName, EmailAddress, ListName, Page, Timestamp};
use crate::storage::{StoreError, in_read, in_write};
use std::sync::Arc;

pub type Factory<'a> = &'a dyn Fn() -> Arc<Store>;

pub fn run_all(fresh: Factory<'_>) {
    accounts_are_unique_per_address_whatever_the_case(&*fresh());
    a_duplicate_leaves_the_transaction_usable(&*fresh());
    listings_page_and_show_only_what_the_caller_may_see(&*fresh());
    roles_are_granted_once_revoked_and_counted(&*fresh());
    keys_keep_their_scope_permissions_and_first_revocation(&*fresh());
    sessions_and_one_time_tokens_are_found_by_hash_and_used_once(&*fresh());
    deleting_an_account_takes_its_roles_keys_sessions_and_tokens(&*fresh());
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_unix_secs(1_700_000_000 + secs)
}

fn email(s: &str) -> EmailAddress {
    EmailAddress::parse(s).unwrap()
}

fn new_user(store: &Store, address: &str) -> UserId {
    in_write(store, |tx| tx.insert_user(&email(address), &Profile::default(), None, at(0))).unwrap()
}

fn key(user: UserId, prefix: &str, scope: KeyScope, created: i64) -> ApiKey {
    ApiKey {
        id: KeyId::from_stored(0),
        user_id: user,
        name: format!("key {prefix}"),
        prefix: prefix.to_owned(),
        scope,
        perms: PermSet::of(&[Perm::Read, Perm::Send]),
        rate_limit_per_min: 120,
        expires_at: Some(at(3_600)),
        created_at: at(created),
        revoked_at: None,
    }
}

pub fn accounts_are_unique_per_address_whatever_the_case(store: &Store) {
    let profile = Profile {
        firstname: Some("Anna".into()),
        name: Some("Müller \"A\"".into()),
        mobile: None,
        language_code_id: Some("fr".into()),
    };
    let id =
        in_write(store, |tx| tx.insert_user(&email("Anna@Example.org"), &profile, Some("$argon2id$x"), at(1))).unwrap();
    let again = in_write(store, |tx| tx.insert_user(&email("anna@example.org"), &Profile::default(), None, at(2)));
    assert_eq!(again, Err(StoreError::Duplicate));

    let found = in_read(store, |tx| tx.user_by_email(&email("ANNA@example.ORG"))).unwrap().unwrap();
    assert_eq!(found.user.id, id);
    assert_eq!(found.user.email.to_string(), "Anna@example.org", "the local part keeps the case it was given");
    assert_eq!(found.user.profile, profile);
    assert_eq!((found.user.status, found.user.has_password), (UserStatus::Active, true));
    assert_eq!(found.password_hash.as_deref(), Some("$argon2id$x"));
    assert_eq!((found.user.created_at, found.user.updated_at, found.user.email_verified_at), (at(1), at(1), None));

    let mut user = found.user;
    user.profile.mobile = Some("+33 6 00 00 00 00".into());
    user.status = UserStatus::Disabled;
    in_write(store, |tx| {
        tx.update_user(&user, at(5))?;
        tx.set_password_hash(id, "$argon2id$y", at(6))
    })
    .unwrap();
    let read = in_read(store, |tx| tx.user_by_id(id)).unwrap().unwrap();
    assert_eq!(read.user.profile.mobile.as_deref(), Some("+33 6 00 00 00 00"));
    assert_eq!((read.user.status, read.user.updated_at), (UserStatus::Disabled, at(6)));
    assert_eq!(read.password_hash.as_deref(), Some("$argon2id$y"));
    assert!(in_read(store, |tx| tx.user_by_id(UserId::from_stored(id.get() + 1000))).unwrap().is_none());
}

/// A rule may meet a uniqueness refusal, answer it, and go on in the same transaction (a refusal's
/// audit entry is committed with it): the refused statement alone is taken back.
pub fn a_duplicate_leaves_the_transaction_usable(store: &Store) {
    let first = new_user(store, "bob@example.org");
    let (second, refused) = in_write(store, |tx| {
        let refused =
            tx.grant_role(first, &Role::SiteAdmin, at(1)).and_then(|_| tx.grant_role(first, &Role::SiteAdmin, at(2)));
        let second = tx.insert_user(&email("carol@example.org"), &Profile::default(), None, at(3))?;
        Ok::<_, StoreError>((second, refused))
    })
    .unwrap();
    assert_eq!(refused, Err(StoreError::Duplicate));
    let (roles, carol) =
        in_read(store, |tx| Ok::<_, StoreError>((tx.roles_of(first)?, tx.user_by_id(second)?))).unwrap();
    assert_eq!(roles.len(), 1, "the first grant stays");
    assert!(carol.is_some(), "what followed the refusal was committed");
}

pub fn listings_page_and_show_only_what_the_caller_may_see(store: &Store) {
    let ids: Vec<UserId> = (0..7).map(|i| new_user(store, &format!("u{i}@example.org"))).collect();
    let shop = DomainName::parse("shop.example").unwrap();
    in_write(store, |tx| {
        tx.grant_role(ids[2], &Role::DomainAdmin(shop.clone()), at(1))?;
        tx.grant_role(ids[4], &Role::Owner(shop.clone(), ListName::parse("news").unwrap()), at(1))?;
        tx.grant_role(ids[5], &Role::DomainAdmin(DomainName::parse("other.example").unwrap()), at(1))
    })
    .unwrap();
    let page = |limit: &str, offset: &str| Page::parse(Some(limit), Some(offset)).unwrap();
    let all = in_read(store, |tx| tx.list_users(&UserVisibility::All, page("3", "2"))).unwrap();
    assert_eq!(all.total, 7);
    assert_eq!(all.items.iter().map(|u| u.id).collect::<Vec<_>>(), ids[2..5].to_vec(), "ordered by id");

    let own = UserVisibility::Own { user: ids[0], domains: vec![shop] };
    let mine = in_read(store, |tx| tx.list_users(&own, page("50", "0"))).unwrap();
    assert_eq!(mine.total, 3);
    assert_eq!(mine.items.iter().map(|u| u.id).collect::<Vec<_>>(), vec![ids[0], ids[2], ids[4]]);
    let alone = UserVisibility::Own { user: ids[6], domains: vec![] };
    let just_me = in_read(store, |tx| tx.list_users(&alone, page("50", "0"))).unwrap();
    assert_eq!((just_me.total, just_me.items[0].id), (1, ids[6]));
}

pub fn roles_are_granted_once_revoked_and_counted(store: &Store) {
    let (ann, bea) = (new_user(store, "ann@example.org"), new_user(store, "bea@example.org"));
    let d = DomainName::parse("example.org").unwrap();
    let moderator = Role::Moderator(d.clone(), ListName::parse("news").unwrap());
    let granted = in_write(store, |tx| {
        tx.grant_role(ann, &Role::SiteAdmin, at(1))?;
        tx.grant_role(bea, &Role::SiteAdmin, at(2))?;
        tx.grant_role(ann, &moderator, at(3))
    })
    .unwrap();
    assert_eq!((granted.user_id, &granted.role, granted.granted_at), (ann, &moderator, at(3)));
    assert_eq!(in_write(store, |tx| tx.grant_role(ann, &moderator, at(4))), Err(StoreError::Duplicate));
    let roles = in_read(store, |tx| tx.roles_of(ann)).unwrap();
    assert_eq!(roles.iter().map(|g| g.role.clone()).collect::<Vec<_>>(), vec![Role::SiteAdmin, moderator.clone()]);
    assert_eq!(roles[1].id, granted.id);
    assert_eq!(in_read(store, |tx| tx.count_active_site_admins()).unwrap(), 2);

    let mut b = in_read(store, |tx| tx.user_by_id(bea)).unwrap().unwrap().user;
    b.status = UserStatus::Disabled;
    in_write(store, |tx| tx.update_user(&b, at(5))).unwrap();
    assert_eq!(in_read(store, |tx| tx.count_active_site_admins()).unwrap(), 1, "a disabled admin does not count");

    assert_eq!(in_write(store, |tx| tx.revoke_role(ann, &moderator)), Ok(true));
    assert_eq!(in_write(store, |tx| tx.revoke_role(ann, &moderator)), Ok(false));
    assert_eq!(in_read(store, |tx| tx.roles_of(ann)).unwrap().len(), 1);

    let exists = |role: Role| in_read(store, |tx| tx.role_scope_exists(&role)).unwrap();
    assert!(exists(Role::SiteAdmin));
    assert!(!exists(Role::DomainAdmin(DomainName::parse("nowhere.example").unwrap())));
    assert!(!exists(Role::Owner(DomainName::parse("nowhere.example").unwrap(), ListName::parse("x").unwrap())));
}

pub fn keys_keep_their_scope_permissions_and_first_revocation(store: &Store) {
    let (ann, bea) = (new_user(store, "ann@example.org"), new_user(store, "bea@example.org"));
    let d = DomainName::parse("example.org").unwrap();
    let list = KeyScope::List(d.clone(), ListName::parse("news").unwrap());
    let (k1, k2, k3) = in_write(store, |tx| {
        Ok::<_, StoreError>((
            tx.insert_key(&key(ann, "aaaa", list.clone(), 1), "hash-a")?,
            tx.insert_key(&key(ann, "bbbb", KeyScope::Domain(d.clone()), 2), "hash-b")?,
            tx.insert_key(&key(bea, "cccc", KeyScope::User, 3), "hash-c")?,
        ))
    })
    .unwrap();
    assert_eq!(
        in_write(store, |tx| tx.insert_key(&key(bea, "aaaa", KeyScope::User, 4), "h")),
        Err(StoreError::Duplicate)
    );

    let (found, hash) = in_read(store, |tx| tx.key_by_prefix("aaaa")).unwrap().unwrap();
    assert_eq!(hash, "hash-a");
    assert_eq!(found, ApiKey { id: k1, ..key(ann, "aaaa", list, 1) });
    assert!(in_read(store, |tx| tx.key_by_prefix("zzzz")).unwrap().is_none());
    assert_eq!(in_read(store, |tx| tx.key_by_id(k2)).unwrap().unwrap().scope, KeyScope::Domain(d));

    let page = Page::parse(Some("1"), Some("0")).unwrap();
    let anns = in_read(store, |tx| tx.list_keys(Some(ann), page)).unwrap();
    assert_eq!((anns.total, anns.items.iter().map(|k| k.id).collect::<Vec<_>>()), (2, vec![k2]), "newest first");
    let everyone = in_read(store, |tx| tx.list_keys(None, Page::default())).unwrap();
    assert_eq!(everyone.items.iter().map(|k| k.id).collect::<Vec<_>>(), vec![k3, k2, k1]);

    in_write(store, |tx| tx.revoke_key(k3, at(10))).unwrap();
    in_write(store, |tx| tx.revoke_key(k3, at(20))).unwrap();
    assert_eq!(
        in_read(store, |tx| tx.key_by_id(k3)).unwrap().unwrap().revoked_at,
        Some(at(10)),
        "the first revocation stands"
    );
}

pub fn sessions_and_one_time_tokens_are_found_by_hash_and_used_once(store: &Store) {
    let ann = new_user(store, "ann@example.org");
    let id = in_write(store, |tx| tx.insert_session("session-hash", ann, at(1), at(100))).unwrap();
    assert_eq!(
        in_write(store, |tx| tx.insert_session("session-hash", ann, at(2), at(100))),
        Err(StoreError::Duplicate)
    );
    in_write(store, |tx| tx.touch_session(id, at(7))).unwrap();
    let s = in_read(store, |tx| tx.session_by_token_hash("session-hash")).unwrap().unwrap();
    assert_eq!(
        (s.id, s.user_id, s.created_at, s.last_seen_at, s.expires_at, s.revoked_at),
        (id, ann, at(1), at(7), at(100), None)
    );
    in_write(store, |tx| tx.revoke_session(id, at(8))).unwrap();
    in_write(store, |tx| tx.revoke_session(id, at(9))).unwrap();
    assert_eq!(in_read(store, |tx| tx.session_by_token_hash("session-hash")).unwrap().unwrap().revoked_at, Some(at(8)));
    assert!(in_read(store, |tx| tx.session_by_token_hash("other")).unwrap().is_none());

    in_write(store, |tx| {
        tx.insert_token("set_password", "token-hash", Some(ann), None, at(1), at(50))?;
        tx.insert_token("login_link", "link-hash", None, Some(42), at(1), at(60))
    })
    .unwrap();
    assert!(
        in_read(store, |tx| tx.token_by_hash("login_link", "token-hash")).unwrap().is_none(),
        "purpose is part of the key"
    );
    let t = in_read(store, |tx| tx.token_by_hash("set_password", "token-hash")).unwrap().unwrap();
    assert_eq!((t.user_id, t.subject_id, t.expires_at, t.used_at), (Some(ann), None, at(50), None));
    let link = in_read(store, |tx| tx.token_by_hash("login_link", "link-hash")).unwrap().unwrap();
    assert_eq!((link.user_id, link.subject_id), (None, Some(42)));
    assert_eq!(in_write(store, |tx| tx.use_token(t.id, at(2))), Ok(true));
    assert_eq!(in_write(store, |tx| tx.use_token(t.id, at(3))), Ok(false), "a token is used once");
    assert_eq!(
        in_read(store, |tx| tx.token_by_hash("set_password", "token-hash")).unwrap().unwrap().used_at,
        Some(at(2))
    );
}

pub fn deleting_an_account_takes_its_roles_keys_sessions_and_tokens(store: &Store) {
    let (ann, bea) = (new_user(store, "ann@example.org"), new_user(store, "bea@example.org"));
    in_write(store, |tx| {
        for (user, tag) in [(ann, "a"), (bea, "b")] {
            tx.grant_role(user, &Role::SiteAdmin, at(1))?;
            tx.insert_key(&key(user, &format!("key{tag}"), KeyScope::User, 1), "h")?;
            tx.insert_session(&format!("session-{tag}"), user, at(1), at(100))?;
            tx.insert_token("set_password", &format!("token-{tag}"), Some(user), None, at(1), at(100))?;
        }
        Ok::<_, StoreError>(())
    })
    .unwrap();
    assert_eq!(in_write(store, |tx| tx.delete_user(ann)), Ok(true));
    assert_eq!(in_write(store, |tx| tx.delete_user(ann)), Ok(false));
    let gone = in_read(store, |tx| {
        Ok::<_, StoreError>((
            tx.user_by_id(ann)?.is_none(),
            tx.roles_of(ann)?.is_empty(),
            tx.key_by_prefix("keya")?.is_none(),
            tx.session_by_token_hash("session-a")?.is_none(),
            tx.token_by_hash("set_password", "token-a")?.is_none(),
        ))
    })
    .unwrap();
    assert_eq!(gone, (true, true, true, true, true));
    let kept = in_read(store, |tx| {
        Ok::<_, StoreError>((
            tx.roles_of(bea)?.len(),
            tx.key_by_prefix("keyb")?.is_some(),
            tx.session_by_token_hash("session-b")?.is_some(),
        ))
    })
    .unwrap();
    assert_eq!(kept, (1, true, true), "another account keeps its own");
}
