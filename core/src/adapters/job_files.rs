//! The job locks of an installation on one host (SQLite in the data directory): one lock file per
//! job under `<data dir>/jobs/`, held with `flock(2)` for as long as the process runs the job, and
//! naming its holder (`pid@host`) inside.
//!
//! Why a lock file rather than a row lease with an expiry: the kernel releases a `flock` the moment
//! its holder dies (even by SIGKILL), so a successor takes over at its next tick with no expiry to
//! wait for and no clock to trust, and holding it costs no write to the database (whose single
//! writer is the bottleneck of a SQLite installation). Every process of a SQLite installation runs
//! on the host holding its data directory, so a host-local lock is enough. A process that reads
//! the holders takes a shared lock for an instant: a holder taking the job at that very instant
//! skips one tick.

use crate::storage::StoreError;
use crate::storage::jobs::{HeldLock, Holder, Job, JobLease, JobLocks};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::PathBuf;

pub struct FileJobLocks {
    dir: PathBuf,
    holder: Holder,
}

/// This process, as a job's holder: the kernel's host name and our pid.
pub fn this_process() -> Holder {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default().trim().to_owned();
    Holder { host: if host.is_empty() { "localhost".into() } else { host }, pid: std::process::id() }
}

impl FileJobLocks {
    /// Locks under `dir` (created owner-only at the first hold), taken in `holder`'s name.
    pub fn new(dir: impl Into<PathBuf>, holder: Holder) -> Self {
        Self { dir: dir.into(), holder }
    }

    fn path(&self, job: Job) -> PathBuf {
        self.dir.join(format!("{}.lock", job.name()))
    }
}

/// The open lock file: the `flock` lasts as long as it stays open.
struct HeldFile(#[allow(dead_code)] File);

impl HeldLock for HeldFile {
    /// Only closing the file lets a `flock` go: a live process never loses it.
    fn still_held(&mut self) -> bool {
        true
    }
}

fn backend(what: &str, path: &std::path::Path, e: std::io::Error) -> StoreError {
    StoreError::Backend(format!("{what} {}: {e}", path.display()))
}

impl JobLocks for FileJobLocks {
    fn try_hold(&self, job: Job) -> Result<Option<JobLease>, StoreError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
        match std::fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(backend("cannot create", &self.dir, e)),
        }
        let path = self.path(job);
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| backend("cannot open", &path, e))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Ok(None),
            Err(TryLockError::Error(e)) => return Err(backend("cannot lock", &path, e)),
        }
        // Ours now: name the holder (what a previous holder wrote is overwritten).
        let named = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(format!("{}\n", self.holder.label()).as_bytes()));
        if let Err(e) = named {
            tracing::warn!(error = %e, path = %path.display(), "cannot name the holder in a job lock file");
        }
        Ok(Some(JobLease::new(job, Box::new(HeldFile(file)))))
    }

    fn holders(&self) -> Result<Vec<(Job, Holder)>, StoreError> {
        let mut out = Vec::new();
        for job in Job::ALL {
            let path = self.path(job);
            let mut file = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(backend("cannot open", &path, e)),
            };
            match file.try_lock_shared() {
                Ok(()) => continue, // nobody holds it (closing the file lets our shared lock go)
                Err(TryLockError::WouldBlock) => {}
                Err(TryLockError::Error(e)) => return Err(backend("cannot lock", &path, e)),
            }
            let mut label = String::new();
            file.read_to_string(&mut label).map_err(|e| backend("cannot read", &path, e))?;
            // A holder that has not written its name yet is still a holder.
            let holder = Holder::parse_label(&label).unwrap_or(Holder { host: "?".into(), pid: 0 });
            out.push((job, holder));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(dir: &std::path::Path, pid: u32) -> FileJobLocks {
        FileJobLocks::new(dir.join("jobs"), Holder { host: "host-a".into(), pid })
    }

    #[test]
    fn one_of_two_holders_wins_and_the_other_takes_over_once_it_lets_go() {
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = (process(dir.path(), 1), process(dir.path(), 2));
        assert!(two.holders().unwrap().is_empty(), "nothing held yet");
        let lease = one.try_hold(Job::Digests).unwrap().expect("free at first");
        assert!(two.try_hold(Job::Digests).unwrap().is_none(), "held by the first");
        assert!(one.try_hold(Job::Digests).unwrap().is_none(), "a second lease of one process is refused too");
        assert!(two.try_hold(Job::IdempotencyPurge).unwrap().is_some(), "another job is another lock");
        assert_eq!(two.holders().unwrap(), [(Job::Digests, Holder { host: "host-a".into(), pid: 1 })]);
        drop(lease);
        let taken = two.try_hold(Job::Digests).unwrap().expect("free once dropped");
        assert_eq!(one.holders().unwrap(), [(Job::Digests, Holder { host: "host-a".into(), pid: 2 })]);
        assert_eq!(taken.job(), Job::Digests);
    }

    #[test]
    fn a_job_held_by_a_process_that_died_is_free() {
        let dir = tempfile::tempdir().unwrap();
        let locks = process(dir.path(), 1);
        drop(locks.try_hold(Job::OcrRetention).unwrap());
        // Another process holds the lock file: util-linux's flock(1) (`-o`: it alone, not its
        // command), then SIGKILL.
        let mut child = std::process::Command::new("flock")
            .args(["-x", "-n", "-o"])
            .arg(locks.path(Job::OcrRetention))
            .args(["sleep", "30"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("flock(1) runs");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while locks.holders().unwrap().is_empty() {
            assert!(std::time::Instant::now() < deadline, "the child never took the lock");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(locks.try_hold(Job::OcrRetention).unwrap().is_none(), "held by the child");
        child.kill().unwrap();
        child.wait().unwrap();
        // flock(1) forks its command before the child closes the inherited descriptor (`-o` closes
        // it at exec): for that instant the child shares the lock, and the kernel lets it go
        // with the last descriptor. Waited for, bounded: a lock never freed still fails.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while locks.try_hold(Job::OcrRetention).unwrap().is_none() {
            assert!(std::time::Instant::now() < deadline, "the kernel let the dead holder's lock go");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
