//! Wire shapes of core's types that more than one frontend prints (the CLI's `--json` too).

use courrier_core::kernel::VersionInfo;
use serde_json::{Value, json};

/// The contract's Version object. `go_version` is the contract's key; it and `rust_version` hold
/// the Rust compiler's version (`decisions.md`). `built_at` only when injected at build.
pub fn version(v: &VersionInfo) -> Value {
    let mut doc = json!({
        "version": v.build.version,
        "commit": v.build.commit,
        "dirty": v.build.dirty,
        "go_version": v.build.rustc,
        "rust_version": v.build.rustc,
        "platform": v.build.platform,
        "backend": v.backend,
    });
    if let Some(at) = v.build.commit_at {
        doc["commit_at"] = at.into();
    }
    if let Some(at) = v.build.built_at {
        doc["built_at"] = at.into();
    }
    doc
}
