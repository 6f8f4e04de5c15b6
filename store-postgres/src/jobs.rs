//! The installation's job locks on PostgreSQL: a job is held by a session-level advisory lock
//! (`pg_try_advisory_lock(JOB_LOCKS, job number)`) on a connection of its own, kept open while this
//! process runs the job. Closing it (the lease dropped) frees the job, and so does PostgreSQL
//! itself when the process dies and its session ends: no expiry, no clock. The session's
//! `application_name` names the holder (`courrier-job pid@host`), so `pg_locks` joined with
//! `pg_stat_activity` says which process runs each job; no table is written.
//!
//! A job lock costs one connection per job held in the installation (not per process): a process
//! that finds a job held closes its attempt's connection at once.

use super::{PostgresStore, map_err};
use courrier_core::storage::StoreError;
use courrier_core::storage::jobs::{HeldLock, Holder, Job, JobLease, JobLocks};
use postgres::{Client, NoTls};

/// The first key of every job lock ("cour" in ASCII): in `pg_locks`, the `classid` of an advisory
/// lock taken with two integer keys (`objsubid = 2`), apart from the write and migration locks
/// (one 64-bit key each, `objsubid = 1`).
const JOB_LOCKS: i32 = 0x636f_7572;
const APPLICATION: &str = "courrier-job ";

pub struct PgJobLocks {
    config: postgres::Config,
    holder: Holder,
}

impl PostgresStore {
    /// The job locks of the installation on this database, taken in `holder`'s name.
    pub fn job_locks(&self, holder: Holder) -> PgJobLocks {
        PgJobLocks { config: self.config.clone(), holder }
    }
}

/// The session holding one job's lock.
struct Session {
    client: Client,
    job: Job,
}

impl HeldLock for Session {
    /// Asks the session whether the lock is still granted to it: `false` once the session is gone
    /// (the server restarted, an administrator ended it), and the job may be another's already.
    fn still_held(&mut self) -> bool {
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = pg_backend_pid() AND locktype = 'advisory' \
             AND granted AND classid = '{JOB_LOCKS}'::oid AND objid = '{}'::oid AND objsubid = 2)",
            self.job.number()
        );
        match self.client.query_one(&sql, &[]) {
            Ok(row) => row.try_get(0).unwrap_or(false),
            Err(e) => {
                tracing::debug!(error = %e, job = self.job.name(), "a job lock's session is gone");
                false
            }
        }
    }
}

impl JobLocks for PgJobLocks {
    fn try_hold(&self, job: Job) -> Result<Option<JobLease>, StoreError> {
        let mut config = self.config.clone();
        config.application_name(&format!("{APPLICATION}{}", self.holder.label()));
        let mut client = config.connect(NoTls).map_err(map_err)?;
        let row = client
            .query_one(&format!("SELECT pg_try_advisory_lock({JOB_LOCKS}, {})", job.number()), &[])
            .map_err(map_err)?;
        let taken: bool = row.try_get(0).map_err(map_err)?;
        // Not taken: the attempt's connection closes here.
        Ok(taken.then(|| JobLease::new(job, Box::new(Session { client, job }))))
    }

    fn holders(&self) -> Result<Vec<(Job, Holder)>, StoreError> {
        let mut client = self.config.connect(NoTls).map_err(map_err)?;
        let sql = format!(
            "SELECT l.objid::int8, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.classid = '{JOB_LOCKS}'::oid AND l.objsubid = 2 \
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        );
        let mut held = Vec::new();
        for row in client.query(&sql, &[]).map_err(map_err)? {
            let number: i64 = row.try_get(0).map_err(map_err)?;
            let name: Option<String> = row.try_get(1).map_err(map_err)?;
            let Some(job) = Job::from_number(number) else { continue };
            // A name cut at PostgreSQL's 63 bytes keeps the pid; the host may lose its end.
            let holder = name
                .as_deref()
                .and_then(|n| n.strip_prefix(APPLICATION))
                .and_then(Holder::parse_label)
                .unwrap_or(Holder { host: "?".into(), pid: 0 });
            held.push((job, holder));
        }
        held.sort_by_key(|(job, _)| job.number());
        Ok(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_server::TestServer;

    fn holder(host: &str, pid: u32) -> Holder {
        Holder { host: host.into(), pid }
    }

    #[test]
    fn one_of_two_holders_wins_and_a_closed_or_killed_session_frees_the_job() {
        let server = TestServer::start().unwrap();
        let url = server.fresh_database().unwrap();
        let store = PostgresStore::open(&url, 0).unwrap();
        let (one, two) = (store.job_locks(holder("host-a", 1)), store.job_locks(holder("host-b", 2)));
        assert!(two.holders().unwrap().is_empty(), "nothing held yet");

        let mut lease = one.try_hold(Job::Digests).unwrap().expect("free at first");
        assert!(two.try_hold(Job::Digests).unwrap().is_none(), "held by the first");
        assert!(two.try_hold(Job::MailboxPolling).unwrap().is_some(), "another job is another lock");
        assert!(lease.still_held());
        assert_eq!(two.holders().unwrap(), [(Job::Digests, holder("host-a", 1))], "dropped leases are not listed");
        // Another database of the same server is another installation.
        let elsewhere = PostgresStore::open(&server.fresh_database().unwrap(), 0).unwrap();
        assert!(elsewhere.job_locks(holder("host-c", 3)).try_hold(Job::Digests).unwrap().is_some());

        // The holder lets go: its session closes and the job is free at once.
        drop(lease);
        let mut taken = two.try_hold(Job::Digests).unwrap().expect("free once the first closed its session");
        assert_eq!(one.holders().unwrap(), [(Job::Digests, holder("host-b", 2))]);

        // The holder dies without unlocking: PostgreSQL ends its session (here ended by another
        // connection, as when a process is killed) and lets the lock go by itself.
        let mut admin = postgres::Client::connect(&url, NoTls).unwrap();
        let ended = admin
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'courrier-job 2@host-b'",
                &[],
            )
            .unwrap();
        assert_eq!(ended.len(), 1, "one session holds the job");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut again = loop {
            if let Some(lease) = one.try_hold(Job::Digests).unwrap() {
                break lease;
            }
            assert!(std::time::Instant::now() < deadline, "the dead holder's lock was never freed");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        assert!(!taken.still_held(), "the killed holder knows it lost the job");
        assert!(again.still_held());
        assert_eq!(two.holders().unwrap(), [(Job::Digests, holder("host-a", 1))]);
    }
}
