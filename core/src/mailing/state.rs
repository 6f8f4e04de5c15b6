//! The member state machine: one closed set of states ([`MemberStatus`] with its
//! [`PendingReason`]), one closed set of triggers, and one function deciding every move. Rules
//! never set a member's status by hand; they ask [`next`].

use super::model::{MemberStatus, PendingReason, SubscriptionPolicy};

/// A member's state as the machine sees it: `pending` always says why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberState {
    /// No row for this address on this list.
    Absent,
    Pending(PendingReason),
    Active,
    /// Still subscribed, delivery stopped (bounces, or an operator).
    Disabled,
    Unsubscribed,
    Removed,
}

impl MemberState {
    pub fn of(status: MemberStatus, reason: Option<PendingReason>) -> Self {
        match status {
            // The schema ties `pending` to a reason; a missing one reads as a confirmation.
            MemberStatus::Pending => MemberState::Pending(reason.unwrap_or(PendingReason::Confirmation)),
            MemberStatus::Active => MemberState::Active,
            MemberStatus::Disabled => MemberState::Disabled,
            MemberStatus::Unsubscribed => MemberState::Unsubscribed,
            MemberStatus::Removed => MemberState::Removed,
        }
    }

    /// The stored form; `None` for [`MemberState::Absent`].
    pub fn stored(self) -> Option<(MemberStatus, Option<PendingReason>)> {
        match self {
            MemberState::Absent => None,
            MemberState::Pending(r) => Some((MemberStatus::Pending, Some(r))),
            MemberState::Active => Some((MemberStatus::Active, None)),
            MemberState::Disabled => Some((MemberStatus::Disabled, None)),
            MemberState::Unsubscribed => Some((MemberStatus::Unsubscribed, None)),
            MemberState::Removed => Some((MemberStatus::Removed, None)),
        }
    }
}

/// What happens to a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    /// A subscription request under the list's policy.
    Subscribe(SubscriptionPolicy),
    /// A request through the public subscription form: a confirmation mail first whatever the
    /// policy (the form proves nothing about who typed the address); the policy applies once the
    /// link is followed.
    SubscribeByForm(SubscriptionPolicy),
    /// An administrator adds the address attesting consent (`force`, CSV import): active at once,
    /// whatever the policy.
    AddWithConsent,
    /// The subscriber followed the confirmation link, the list being under this policy now: a
    /// moderated list holds the confirmed request for a moderator.
    Confirm(SubscriptionPolicy),
    /// A moderator approved a pending subscription.
    Approve,
    /// A moderator rejected a pending subscription.
    Reject,
    /// The subscriber left.
    Unsubscribe,
    /// An administrator removed the member.
    Remove,
    /// The bounce score reached the list's threshold.
    DisableForBounces,
    Reenable,
}

/// Why a trigger does not apply to a state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Subscribing an address that is already subscribed (active or disabled): 409.
    AlreadySubscribed,
    /// The list takes no subscriptions: 403.
    Closed,
    /// Nothing to confirm, approve, reject or undo in this state: 409.
    NotApplicable,
}

/// The one transition function. `Ok(next)` may equal the current state (a repeated pending
/// subscription stays pending, and its confirmation is sent again).
pub fn next(from: MemberState, trigger: Trigger) -> Result<MemberState, Refusal> {
    use MemberState as S;
    use Trigger as T;
    match (from, trigger) {
        (S::Active | S::Disabled, T::Subscribe(_) | T::SubscribeByForm(_) | T::AddWithConsent) => {
            Err(Refusal::AlreadySubscribed)
        }
        (_, T::Subscribe(SubscriptionPolicy::Closed) | T::SubscribeByForm(SubscriptionPolicy::Closed)) => {
            Err(Refusal::Closed)
        }
        (S::Absent | S::Unsubscribed | S::Removed, T::SubscribeByForm(_)) => {
            Ok(S::Pending(PendingReason::Confirmation))
        }
        (S::Pending(r), T::SubscribeByForm(_)) => Ok(S::Pending(r)),
        (S::Absent | S::Unsubscribed | S::Removed | S::Pending(_), T::AddWithConsent) => Ok(S::Active),
        (S::Absent | S::Unsubscribed | S::Removed, T::Subscribe(policy)) => Ok(admission(policy)),
        // Asking again while pending keeps the request where it is (a new confirmation mail goes
        // out for a confirmation): a changed policy does not skip a moderator's decision.
        (S::Pending(r), T::Subscribe(_)) => Ok(S::Pending(r)),
        (S::Pending(PendingReason::Confirmation), T::Confirm(SubscriptionPolicy::Closed)) => Err(Refusal::Closed),
        (S::Pending(PendingReason::Confirmation), T::Confirm(SubscriptionPolicy::Moderate)) => {
            Ok(S::Pending(PendingReason::Moderation))
        }
        (
            S::Pending(PendingReason::Confirmation),
            T::Confirm(SubscriptionPolicy::Open | SubscriptionPolicy::Confirm),
        ) => Ok(S::Active),
        (S::Pending(PendingReason::Moderation), T::Approve) => Ok(S::Active),
        (S::Pending(PendingReason::Moderation), T::Reject) => Ok(S::Removed),
        (S::Pending(_) | S::Active | S::Disabled, T::Unsubscribe) => Ok(S::Unsubscribed),
        (S::Pending(_) | S::Active | S::Disabled | S::Unsubscribed, T::Remove) => Ok(S::Removed),
        (S::Active, T::DisableForBounces) => Ok(S::Disabled),
        (S::Disabled, T::Reenable) => Ok(S::Active),
        (
            S::Absent | S::Pending(_) | S::Active | S::Disabled | S::Unsubscribed | S::Removed,
            T::Confirm(_) | T::Approve | T::Reject | T::Unsubscribe | T::Remove | T::DisableForBounces | T::Reenable,
        ) => Err(Refusal::NotApplicable),
    }
}

fn admission(policy: SubscriptionPolicy) -> MemberState {
    match policy {
        SubscriptionPolicy::Open => MemberState::Active,
        SubscriptionPolicy::Confirm => MemberState::Pending(PendingReason::Confirmation),
        SubscriptionPolicy::Moderate => MemberState::Pending(PendingReason::Moderation),
        // Refused before reaching here; kept total so the match stays exhaustive.
        SubscriptionPolicy::Closed => MemberState::Absent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use MemberState as S;
    use PendingReason as R;
    use SubscriptionPolicy as P;
    use Trigger as T;

    #[test]
    fn subscriptions_follow_the_policy() {
        assert_eq!(next(S::Absent, T::Subscribe(P::Open)), Ok(S::Active));
        assert_eq!(next(S::Absent, T::Subscribe(P::Confirm)), Ok(S::Pending(R::Confirmation)));
        assert_eq!(next(S::Absent, T::Subscribe(P::Moderate)), Ok(S::Pending(R::Moderation)));
        assert_eq!(next(S::Absent, T::Subscribe(P::Closed)), Err(Refusal::Closed));
        assert_eq!(next(S::Unsubscribed, T::Subscribe(P::Open)), Ok(S::Active), "coming back");
        assert_eq!(next(S::Removed, T::Subscribe(P::Confirm)), Ok(S::Pending(R::Confirmation)));
    }

    #[test]
    fn an_active_subscriber_cannot_subscribe_again() {
        for from in [S::Active, S::Disabled] {
            for t in [T::Subscribe(P::Open), T::Subscribe(P::Closed), T::AddWithConsent] {
                assert_eq!(next(from, t), Err(Refusal::AlreadySubscribed), "{from:?} {t:?}");
            }
        }
    }

    #[test]
    fn consent_attested_by_an_administrator_activates_whatever_the_policy() {
        for from in [S::Absent, S::Unsubscribed, S::Removed, S::Pending(R::Moderation)] {
            assert_eq!(next(from, T::AddWithConsent), Ok(S::Active), "{from:?}");
        }
    }

    #[test]
    fn pending_requests_resolve_only_the_way_they_wait() {
        assert_eq!(next(S::Pending(R::Confirmation), T::Confirm(P::Confirm)), Ok(S::Active));
        assert_eq!(next(S::Pending(R::Moderation), T::Confirm(P::Confirm)), Err(Refusal::NotApplicable));
        assert_eq!(next(S::Pending(R::Moderation), T::Approve), Ok(S::Active));
        assert_eq!(next(S::Pending(R::Confirmation), T::Approve), Err(Refusal::NotApplicable));
        assert_eq!(next(S::Pending(R::Moderation), T::Reject), Ok(S::Removed));
        assert_eq!(next(S::Pending(R::Moderation), T::Subscribe(P::Open)), Ok(S::Pending(R::Moderation)));
        assert_eq!(next(S::Active, T::Confirm(P::Confirm)), Err(Refusal::NotApplicable), "a link used twice");
    }

    #[test]
    fn the_public_form_always_asks_for_a_confirmation_then_follows_the_policy() {
        for policy in [P::Open, P::Confirm, P::Moderate] {
            for from in [S::Absent, S::Unsubscribed, S::Removed] {
                assert_eq!(
                    next(from, T::SubscribeByForm(policy)),
                    Ok(S::Pending(R::Confirmation)),
                    "{from:?} {policy:?}"
                );
            }
        }
        assert_eq!(next(S::Absent, T::SubscribeByForm(P::Closed)), Err(Refusal::Closed));
        assert_eq!(next(S::Active, T::SubscribeByForm(P::Open)), Err(Refusal::AlreadySubscribed));
        assert_eq!(next(S::Pending(R::Moderation), T::SubscribeByForm(P::Open)), Ok(S::Pending(R::Moderation)));
        assert_eq!(next(S::Pending(R::Confirmation), T::Confirm(P::Open)), Ok(S::Active));
        assert_eq!(next(S::Pending(R::Confirmation), T::Confirm(P::Moderate)), Ok(S::Pending(R::Moderation)));
        assert_eq!(next(S::Pending(R::Confirmation), T::Confirm(P::Closed)), Err(Refusal::Closed));
    }

    #[test]
    fn leaving_and_bounces() {
        assert_eq!(next(S::Active, T::Unsubscribe), Ok(S::Unsubscribed));
        assert_eq!(next(S::Unsubscribed, T::Unsubscribe), Err(Refusal::NotApplicable));
        assert_eq!(next(S::Active, T::DisableForBounces), Ok(S::Disabled));
        assert_eq!(next(S::Disabled, T::Reenable), Ok(S::Active));
        assert_eq!(next(S::Removed, T::Remove), Err(Refusal::NotApplicable));
        assert_eq!(next(S::Absent, T::Unsubscribe), Err(Refusal::NotApplicable));
    }

    #[test]
    fn stored_form_round_trips() {
        for s in [
            S::Pending(R::Confirmation),
            S::Pending(R::Moderation),
            S::Active,
            S::Disabled,
            S::Unsubscribed,
            S::Removed,
        ] {
            let (status, reason) = s.stored().unwrap();
            assert_eq!(MemberState::of(status, reason), s);
        }
        assert_eq!(S::Absent.stored(), None);
    }
}
