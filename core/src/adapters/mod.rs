//! Adapters: the only modules that import an outside library to reach the world (a database, a
//! network, the system clock). Each implements a port that core's rules use.

pub mod smtp;
pub mod sqlite;
pub mod system_clock;
