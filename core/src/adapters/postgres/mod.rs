//! The PostgreSQL adapter of the storage port (issue 25). So far: the test harness.

#[cfg(any(test, feature = "testing"))]
pub mod test_server;
