//! The integration tests' harness: the real server on a free port with a fresh data directory,
//! in-process ([`TestApp`]) or as the real `courrier` binary ([`ProcessApp`]).

pub mod browser;
pub mod harness;
pub mod peers;
