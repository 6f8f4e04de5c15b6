//! What every SQL adapter of the store spells the same way, so that a table's encodings are
//! written once: how roles and key scopes ([`access_columns`]) and the mailing context's composite
//! values ([`mailing_columns`]) are kept in columns. Names no database crate: each adapter turns a
//! [`access_columns::Corrupt`] value into its own error once.

pub mod access_columns;
pub mod mailing_columns;
