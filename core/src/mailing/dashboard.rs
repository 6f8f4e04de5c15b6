//! The dashboard (counts adapted to the caller's reach) and the outgoing queue's depth.

use super::MailingError;
use super::Service;
use super::domains;
use super::model::{CopyState, DomainVisibility, ListId, ListVisibility, StatusCounts};
use crate::access::model::KeyScope;
use crate::access::{AccessError, Perm, Principal, Role, Via};
use crate::kernel::{Page, Timestamp};
use crate::storage::in_read;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dashboard {
    pub domains: u64,
    pub lists: u64,
    pub members: StatusCounts,
    /// Sends not yet completed.
    pub sends_in_flight: u64,
    /// Posts held for moderation.
    pub held_messages: u64,
    /// Subscriptions waiting for a moderator (the moderation queue; those waiting for their own
    /// confirmation are in `members.pending`).
    pub pending_subscriptions: u64,
    /// Bounces recorded over the last 7 days: (permanent, temporary).
    pub bounces_7d: (u64, u64),
}

fn require_read(p: &Principal) -> Result<(), MailingError> {
    if p.credential_perms().contains(Perm::Read) {
        Ok(())
    } else {
        Err(AccessError::Forbidden("this needs the read permission".into()).into())
    }
}

/// Counts over what the caller sees: the domains of its reach and, in each, the lists it sees.
pub fn dashboard(app: &Service, p: &Principal) -> Result<Dashboard, MailingError> {
    require_read(p)?;
    let visible = domains::visibility(p);
    let key_list = match &p.via {
        Via::Key(k) => match &k.scope {
            KeyScope::List(_, l) => Some(l.clone()),
            KeyScope::User | KeyScope::Domain(_) => None,
        },
        Via::Session(_) | Via::Operator => None,
    };
    in_read(&*app.store, |tx| {
        let mut out = Dashboard::default();
        let mut list_ids: Vec<ListId> = Vec::new();
        let mut offset = 0;
        loop {
            let page = Page::parse(Some("500"), Some(&offset.to_string()))?;
            let domains = tx.list_domains(&visible, None, page)?;
            out.domains = domains.total;
            for d in &domains.items {
                let administers = p.is_site_admin() || p.roles.contains(&Role::DomainAdmin(d.name.clone()));
                let own: Vec<_> = p
                    .roles
                    .iter()
                    .filter_map(|r| match r {
                        Role::Owner(rd, l) | Role::Moderator(rd, l) if *rd == d.name => Some(l.clone()),
                        _ => None,
                    })
                    .collect();
                let lists = match &key_list {
                    Some(l) if administers || own.contains(l) => ListVisibility::Only(vec![l.clone()]),
                    Some(_) => ListVisibility::Only(Vec::new()),
                    None if administers => ListVisibility::All,
                    None => ListVisibility::Only(own),
                };
                list_ids.extend(tx.lists_of_domain(d.id, &lists)?.iter().map(|l| l.id));
            }
            offset += domains.items.len();
            if domains.items.is_empty() || offset as u64 >= domains.total {
                break;
            }
        }
        out.lists = list_ids.len() as u64;
        let everything = visible == DomainVisibility::All && key_list.is_none();
        out.members = if everything {
            tx.member_counts(None)?
        } else if list_ids.is_empty() {
            StatusCounts::default()
        } else {
            tx.member_counts(Some(&list_ids))?
        };
        out.pending_subscriptions = if everything {
            tx.count_pending_moderation(None)?
        } else if list_ids.is_empty() {
            0
        } else {
            tx.count_pending_moderation(Some(&list_ids))?
        };
        out.held_messages = if everything {
            tx.count_held(None)?
        } else if list_ids.is_empty() {
            0
        } else {
            tx.count_held(Some(&list_ids))?
        };
        out.sends_in_flight = if everything {
            tx.open_sends(None)?
        } else if list_ids.is_empty() {
            0
        } else {
            tx.open_sends(Some(&list_ids))?
        };
        let week_ago = app.clock.now().plus_secs(-super::bounces::DECAY_SECS);
        out.bounces_7d = if everything {
            tx.bounce_counts(None, week_ago)?
        } else if list_ids.is_empty() {
            (0, 0)
        } else {
            tx.bounce_counts(Some(&list_ids), week_ago)?
        };
        Ok(out)
    })
}

/// The outgoing queue: copies waiting (queued, deferred) or leased (sending), and the oldest
/// waiting copy's age.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub depth: u64,
    pub by_state: Vec<(&'static str, u64)>,
    pub oldest_queued_at: Option<Timestamp>,
}

pub fn queue(app: &Service, p: &Principal) -> Result<QueueStats, MailingError> {
    require_read(p)?;
    let (counts, oldest) = in_read(&*app.store, |tx| tx.queue_stats())?;
    let by_state: Vec<(&'static str, u64)> = [CopyState::Queued, CopyState::Sending, CopyState::Deferred]
        .into_iter()
        .map(|s| (s.as_str(), counts.get(s)))
        .collect();
    Ok(QueueStats { depth: by_state.iter().map(|(_, n)| n).sum(), by_state, oldest_queued_at: oldest })
}
