//! Courrier's core: every domain rule, synchronous, behind ports.
//!
//! One service per context ([`access::Service`], [`mailing::Service`], [`ocr::Service`]), each
//! holding only the ports its rules use, wired by the composition root (the `courrier` binary).
//! Frontends (`courrier-http`, the CLI) parse input into the validated types of [`kernel`], call
//! a context's operation, and render what it returns. Nothing here is async or knows HTTP.
//!
//! Floors: `mailing` and `ocr` build on `access`; all three on `kernel` and `storage`; `adapters`
//! implement the ports. No floor imports one above it, and `mailing` and `ocr` never meet.

pub mod access;
pub mod adapters;
pub mod egress;
pub mod kernel;
pub mod mailing;
pub mod ocr;
pub mod storage;
pub mod system;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
