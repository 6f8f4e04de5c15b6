//! The installation's data key on PostgreSQL (`decisions.md`): every server must open the same
//! webhook secrets and DKIM keys, so the key lives in the database (`installation_secrets`),
//! sealed by `COURRIER_MASTER_KEY`. The first server to start makes it; every later one (and every
//! one starting at the same time) reads that one.

use super::{PostgresStore, map_err};
use courrier_core::adapters::data_key::MasterKey;
use courrier_core::kernel::sealed::{DataKey, SealError};
use courrier_core::storage::StoreError;

const NAME: &str = "data_key";
/// What the sealed key is bound to: a sealed value copied from another row does not open.
const BOUND_TO: &str = "installation_secrets:data_key";

#[derive(Debug, thiserror::Error)]
pub enum DataKeyError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "it does not open the data key in the database, which key {0} sealed: every server of an installation \
         must be given the same COURRIER_MASTER_KEY"
    )]
    OtherMasterKey(String),
    #[error("the data key in the database does not open with it ({0}): it was altered")]
    Unreadable(SealError),
}

impl PostgresStore {
    /// The installation's data key, opened with `master`; made and sealed with it on first use.
    pub fn data_key(&self, master: &MasterKey, now_micros: i64) -> Result<DataKey, DataKeyError> {
        let sealing = master.sealing_key();
        let mut conn = self.connection()?;
        let (bytes, _) = DataKey::generate();
        // Two servers starting together: the first insert wins, both read the winner.
        conn.client
            .execute(
                "INSERT INTO installation_secrets (name, sealed, created_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (name) DO NOTHING",
                &[&NAME, &sealing.seal(&bytes, BOUND_TO), &now_micros],
            )
            .map_err(map_err)?;
        let sealed: String = conn
            .client
            .query_one("SELECT sealed FROM installation_secrets WHERE name = $1", &[&NAME])
            .and_then(|r| r.try_get(0))
            .map_err(map_err)?;
        let opened = sealing.open(&sealed, BOUND_TO).map_err(|e| match e {
            SealError::OtherKey(id) => DataKeyError::OtherMasterKey(id),
            other => DataKeyError::Unreadable(other),
        })?;
        let key: [u8; 32] = opened.as_slice().try_into().map_err(|_| DataKeyError::Unreadable(SealError::Malformed))?;
        Ok(DataKey::from_bytes(&key))
    }
}

/// An installation's data key (`bytes`) as `installation_secrets` holds it, sealed by `master`:
/// what `store copy` writes for the SQLite installation it copies.
pub(crate) fn seal(master: &MasterKey, bytes: &[u8; 32]) -> (&'static str, String) {
    (NAME, master.sealing_key().seal(bytes, BOUND_TO))
}

/// The data key `sealed` holds, opened with `master`.
pub(crate) fn open(master: &MasterKey, sealed: &str) -> Result<[u8; 32], DataKeyError> {
    let opened = master.sealing_key().open(sealed, BOUND_TO).map_err(|e| match e {
        SealError::OtherKey(id) => DataKeyError::OtherMasterKey(id),
        other => DataKeyError::Unreadable(other),
    })?;
    opened.as_slice().try_into().map_err(|_| DataKeyError::Unreadable(SealError::Malformed))
}
