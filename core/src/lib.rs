//! Courrier's core: every domain rule, synchronous, behind ports.
//!
//! Frontends (`courrier-http`, the `courrier` binary) parse input into the validated types of
//! [`kernel`], call a function here with the adapters wired into [`Courrier`], and render what it
//! returns. Nothing here is async or knows HTTP.

pub mod adapters;
pub mod kernel;
pub mod storage;
pub mod system;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

use std::sync::Arc;

/// The wired application: the adapters every rule reaches the world through.
pub struct Courrier {
    pub store: Arc<dyn storage::Store>,
    pub clock: Arc<dyn kernel::Clock>,
    pub build: kernel::BuildInfo,
}
