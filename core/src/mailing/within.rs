//! What a mailing check (is the caller allowed, does the domain or list exist) runs against: the
//! service, reading in a snapshot of its own and auditing a refusal in a write of its own; or the
//! write transaction a rule already holds (an Idempotency-Key's), reading and auditing there.
//! One check, whichever the caller holds.

use super::Service;
use super::ports::Tx;
use crate::access::principal::{AuditSink, InTx};
use crate::kernel::{NewAuditEntry, Timestamp};
use crate::storage::{StoreError, in_read};

pub trait Within: AuditSink {
    fn read<T>(&mut self, f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError>) -> Result<T, StoreError>;
}

impl AuditSink for &Service {
    fn now(&self) -> Timestamp {
        (&*self.access).now()
    }
    fn append_refusal(&mut self, entry: &NewAuditEntry) -> Result<(), StoreError> {
        (&*self.access).append_refusal(entry)
    }
}

impl Within for &Service {
    fn read<T>(&mut self, f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError>) -> Result<T, StoreError> {
        in_read(&*self.store, |tx| f(tx))
    }
}

impl<'t> Within for InTx<'_, dyn Tx + 't> {
    fn read<T>(&mut self, f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError>) -> Result<T, StoreError> {
        f(&mut *self.0)
    }
}
