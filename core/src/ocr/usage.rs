//! Usage and plans: documents, pages and cuts counted per user and calendar month (UTC), and the
//! monthly page quota of each user's plan (`default` from `COURRIER_OCR_PAGES_PER_MONTH`, or one
//! set by `courrier ocr plan`). Over quota, uploads and cuts answer 429 until the month turns.

use super::Service;
pub use super::model::MonthUsage;
use crate::access::model::{User, UserId};
use crate::access::principal::{RequestCtx, audit_done};
use crate::access::{AccessError, Principal};
use crate::kernel::{Code, CoreError, EmailAddress, Timestamp};
use crate::ocr::ports::Tx;
use crate::storage::{StoreError, in_read, in_write};

/// A user's plan: `default` or `custom` (set for that user), and its pages per month (0: no
/// limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    pub custom: bool,
    pub pages_per_month: u32,
}

impl Plan {
    pub fn name(self) -> &'static str {
        if self.custom { "custom" } else { "default" }
    }
}

/// The current month's bounds, as the subscription shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Period {
    pub month: String,
    /// `YYYY-MM-DD`, first and last day.
    pub start: String,
    pub end: String,
    /// When the next month starts (the quota renews).
    pub renews_at: Timestamp,
}

impl Period {
    pub fn of(now: Timestamp) -> Self {
        let iso = now.to_rfc3339();
        let (y, m): (i32, u32) = (iso[..4].parse().unwrap_or(1970), iso[5..7].parse().unwrap_or(1));
        let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
        let renews_at = Timestamp::parse_rfc3339(&format!("{ny:04}-{nm:02}-01")).unwrap_or(now);
        let last = renews_at.plus_secs(-86_400).to_rfc3339();
        Self { month: iso[..7].to_owned(), start: format!("{}-01", &iso[..7]), end: last[..10].to_owned(), renews_at }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error(
        "the monthly quota of {limit} pages of your plan is used up ({used} pages in {month}); it renews on {renews}"
    )]
    QuotaExceeded { limit: u32, used: u64, month: String, renews: String, retry_after: u64 },
    #[error("no account {0:?}")]
    UnknownUser(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Access(#[from] AccessError),
}

impl CoreError for UsageError {
    fn code(&self) -> Code {
        match self {
            UsageError::QuotaExceeded { .. } => Code::RateLimited,
            UsageError::UnknownUser(_) => Code::NotFound,
            UsageError::Invalid(_) => Code::ValidationFailed,
            UsageError::Store(e) => e.code(),
            UsageError::Access(e) => e.code(),
        }
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            UsageError::QuotaExceeded { retry_after, .. } => Some(*retry_after),
            UsageError::Access(e) => e.retry_after(),
            _ => None,
        }
    }
}

pub fn plan_of(tx: &mut dyn Tx, user: UserId, default_pages: u32) -> Result<Plan, StoreError> {
    Ok(match tx.ocr_plan(user)? {
        Some(pages) => Plan { custom: true, pages_per_month: pages },
        None => Plan { custom: false, pages_per_month: default_pages },
    })
}

/// Refuses work once this month's pages reached the plan's quota. Checked before the work, so
/// the page that crosses the limit is done and counted: a document is never cut in half.
pub fn check_quota(app: &Service, user: UserId) -> Result<(), UsageError> {
    let now = app.clock.now();
    let period = Period::of(now);
    let (plan, used) = in_read(&*app.store, |tx| {
        let plan = plan_of(tx, user, app.limits.pages_per_month)?;
        let used = tx.ocr_usage_of(user)?.into_iter().find(|u| u.month == period.month).map_or(0, |u| u.pages);
        Ok::<_, StoreError>((plan, used))
    })?;
    if plan.pages_per_month == 0 || used < u64::from(plan.pages_per_month) {
        return Ok(());
    }
    Err(UsageError::QuotaExceeded {
        limit: plan.pages_per_month,
        used,
        renews: period.end_of_quota(),
        month: period.month,
        retry_after: u64::try_from(period.renews_at.unix_secs() - now.unix_secs()).unwrap_or(0).max(1),
    })
}

impl Period {
    fn end_of_quota(&self) -> String {
        self.renews_at.to_rfc3339()[..10].to_owned()
    }
}

/// Counts work done, in the transaction that records it.
pub fn count(tx: &mut dyn Tx, user: UserId, now: Timestamp, delta: &MonthUsage) -> Result<(), StoreError> {
    let month = Period::of(now).month;
    tx.add_ocr_usage(user, &month, delta)
}

/// `GET /api/subscriptions`: the caller's plan and this month.
pub struct Subscription {
    pub plan: Plan,
    pub period: Period,
    pub used: MonthUsage,
}

pub fn subscription(app: &Service, p: &Principal) -> Result<Subscription, UsageError> {
    let user = p.user.as_ref().ok_or_else(|| UsageError::UnknownUser("the operator".into()))?;
    let period = Period::of(app.clock.now());
    in_read(&*app.store, |tx| {
        let plan = plan_of(tx, user.id, app.limits.pages_per_month)?;
        let used = tx
            .ocr_usage_of(user.id)?
            .into_iter()
            .find(|u| u.month == period.month)
            .unwrap_or(MonthUsage { month: period.month.clone(), ..MonthUsage::default() });
        Ok(Subscription { plan, period: period.clone(), used })
    })
}

/// `/api/subscriptions/stats/{email}`: usage of that address by month, newest first: the
/// caller's own, or anyone's for a site admin. Another's is unknown, exactly like a missing one.
pub struct Stats {
    pub user: User,
    pub plan: Plan,
    pub months: Vec<MonthUsage>,
}

pub fn stats(app: &Service, p: &Principal, email: &str) -> Result<Stats, UsageError> {
    let unknown = || UsageError::UnknownUser(email.chars().take(80).collect());
    let address = EmailAddress::parse(email).map_err(|_| unknown())?;
    let caller = p.user.as_ref().map(|u| u.id);
    in_read(&*app.store, |tx| {
        let user = tx.user_by_email(&address)?.ok_or_else(unknown)?.user;
        if Some(user.id) != caller && !p.is_site_admin() {
            return Err(unknown());
        }
        let plan = plan_of(tx, user.id, app.limits.pages_per_month)?;
        let months = tx.ocr_usage_of(user.id)?;
        Ok(Stats { user, plan, months })
    })
}

/// `courrier ocr plan --email E --pages-per-month N`: one user's own quota (`None` puts the user
/// back on the default plan).
pub fn set_plan(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    email: &str,
    pages: Option<u32>,
) -> Result<Plan, UsageError> {
    let address = EmailAddress::parse(email).map_err(|e| UsageError::Invalid(e.to_string()))?;
    let now = app.clock.now();
    in_write(&*app.store, |tx| {
        let user = tx.user_by_email(&address)?.ok_or_else(|| UsageError::UnknownUser(email.to_owned()))?.user;
        tx.set_ocr_plan(user.id, pages)?;
        audit_done(tx, p, ctx, now, "ocr.plan.set", &format!("user:{}", user.id.get()))?;
        Ok(plan_of(tx, user.id, app.limits.pages_per_month)?)
    })
}

/// [`set_plan`] from the administration pages: the installation's administrators' only.
pub fn set_plan_as(
    app: &Service,
    p: &Principal,
    ctx: &RequestCtx,
    email: &str,
    pages: Option<u32>,
) -> Result<Plan, UsageError> {
    p.authorize(crate::access::Perm::Manage, &crate::access::model::Target::Installation, "plan")?;
    set_plan(app, p, ctx, email, pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_are_calendar_months_in_utc() {
        let p = Period::of(Timestamp::parse_rfc3339("2026-11-23T15:00:00Z").unwrap());
        assert_eq!((p.month.as_str(), p.start.as_str(), p.end.as_str()), ("2026-11", "2026-11-01", "2026-11-30"));
        assert_eq!(p.renews_at, Timestamp::parse_rfc3339("2026-12-01").unwrap());
        let dec = Period::of(Timestamp::parse_rfc3339("2026-12-31T23:59:59Z").unwrap());
        assert_eq!((dec.end.as_str(), dec.end_of_quota().as_str()), ("2026-12-31", "2027-01-01"));
        let feb = Period::of(Timestamp::parse_rfc3339("2028-02-10").unwrap());
        assert_eq!(feb.end, "2028-02-29");
    }
}
