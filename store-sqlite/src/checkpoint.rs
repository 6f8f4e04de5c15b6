//! WAL checkpoints off the write lane. SQLite checkpoints in the connection that commits, once the
//! WAL passes `wal_autocheckpoint` pages: the write lane's one connection, holding the lane, so
//! every writer queued behind it waited for the copy and its fsync. Here a thread with its own
//! connection runs `PRAGMA wal_checkpoint(PASSIVE)` shortly after commits (PASSIVE never blocks
//! writers or readers); the writer's own threshold stays as a safety net (`mod.rs`).

use std::sync::mpsc;
use std::time::Duration;

/// How often the thread looks for new commits.
const EVERY: Duration = Duration::from_millis(100);

/// The checkpoint thread of one store; it ends when this is dropped, which waits for it (its
/// connection is closed before the store's `-shm` descriptor: `mod.rs`).
pub(super) struct Checkpointer {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        // A dropped sender ends the thread's wait at once.
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Checkpointer {
    /// `conn`: a connection of its own on the database, `synchronous=FULL` (a checkpoint syncs the
    /// WAL before copying and the database file after, so that the WAL may be reused safely).
    pub(super) fn start(conn: rusqlite::Connection) -> Self {
        let (stop, stopped) = mpsc::channel::<()>();
        let spawned = std::thread::Builder::new().name("sqlite-checkpoint".into()).spawn(move || {
            let mut seen = None;
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(EVERY) {
                // `data_version` moves when another connection commits: nothing new, nothing to do.
                let Ok(version) = conn.query_row("PRAGMA data_version", [], |r| r.get::<_, i64>(0)) else { continue };
                if seen == Some(version) {
                    continue;
                }
                seen = Some(version);
                if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
                    tracing::warn!(error = %e, "background WAL checkpoint failed");
                }
            }
        });
        let thread = spawned
            .inspect_err(|e| {
                tracing::warn!(error = %e, "no background checkpoint thread: commits checkpoint the WAL themselves");
            })
            .ok();
        Self { stop: Some(stop), thread }
    }
}
