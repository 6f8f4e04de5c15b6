//! What the running binary is, stamped at build time by the `courrier` binary's build script and
//! handed to core at start (core itself has no build script, so a commit does not rebuild it).

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    pub version: &'static str,
    /// Empty when the build had no git checkout to read.
    pub commit: &'static str,
    /// Date of the source commit, when known.
    pub commit_at: Option<&'static str>,
    /// The checkout had uncommitted changes when it was built.
    pub dirty: bool,
    /// Only when injected at build (`COURRIER_BUILT_AT`): builds stay reproducible otherwise.
    pub built_at: Option<&'static str>,
    /// `rustc --version` of the compiler that built the binary.
    pub rustc: &'static str,
    /// `os/arch`, e.g. `linux/x86_64`.
    pub platform: &'static str,
}

impl BuildInfo {
    /// For tests and tools that are not the `courrier` binary.
    pub fn unknown() -> Self {
        Self {
            version: env!("CARGO_PKG_VERSION"),
            commit: "",
            commit_at: None,
            dirty: false,
            built_at: None,
            rustc: "",
            platform: "",
        }
    }
}

/// The version object: build information plus the storage backend in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionInfo {
    pub build: BuildInfo,
    pub backend: String,
}
