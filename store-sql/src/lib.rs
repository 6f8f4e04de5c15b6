//! The store written once for both databases (issue 38): the dialect layer ([`sql`]: shared SQL
//! text, arguments, rows) and the repositories whose statements and row decoders are written once
//! over it ([`credentials`], ...: each adapter implements the port with the module's macro), and
//! what every SQL adapter still spells the same way: how roles and key scopes
//! ([`access_columns`]) and the mailing context's composite values ([`mailing_columns`]) are kept
//! in columns. Names no database crate.

pub mod access_columns;
pub mod audit;
pub mod bounces;
pub mod credentials;
pub mod idempotency;
pub mod inbound;
pub mod mailing_columns;
pub mod members;
pub mod moderation;
pub mod selfservice;
pub mod sql;
