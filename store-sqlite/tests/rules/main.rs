//! Core's rules run over a real SQLite store: what a recording fake cannot show (a transaction's
//! fate, a lease that expires, a crash between two commits, a clock that moves only when told).
//! They were core's unit tests until the store left core: core depends on no database crate, so
//! they live beside the adapter they exercise and reach core only through its public API.

mod accept;
mod bounces;
mod delivery;
mod inbound;
mod lists;
mod me;
mod members;
mod moderation;
mod requests;
mod sessions;
mod webhooks;

/// What the rules' own modules had in scope: their tests were written inside them.
mod prelude {
    pub use courrier_core::access::principal::RequestCtx;
    pub use courrier_core::access::{AccessError, Principal};
    pub use courrier_core::egress::{Header, PostReply};
    pub use courrier_core::kernel::*;
    pub use courrier_core::mailing::model::*;
    pub use courrier_core::mailing::{
        MailingError, credentials, delivery, domains, lists, members, posts, subscriptions,
    };
    pub use courrier_core::storage::{StoreError, in_read, in_write};
    pub use std::sync::Arc;
    pub use std::time::Duration;
}
