use crate::kernel::{Clock, Timestamp};

/// The operating system's wall clock.
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Timestamp::from_unix_micros(i64::try_from(since.as_micros()).unwrap_or(i64::MAX))
    }
}
