//! The process's open-file limit. A server holds a descriptor per connection: with the soft limit
//! many systems hand down (1,024), 1,050 connections made health probes fail (issue 16). The soft
//! limit is raised to the hard limit at start, which needs no privilege.

/// Raises the soft `RLIMIT_NOFILE` to the hard limit; returns the limit now in force.
pub fn raise_to_hard_limit() -> std::io::Result<u64> {
    rlimit::increase_nofile_limit(u64::MAX)
}

/// The soft and hard `RLIMIT_NOFILE`.
pub fn current() -> std::io::Result<(u64, u64)> {
    rlimit::Resource::NOFILE.get()
}
