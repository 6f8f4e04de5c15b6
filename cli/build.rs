//! Stamps the binary with what it was built from: commit, commit date, dirty flag, compiler and
//! platform; the build date only when `COURRIER_BUILT_AT` is given (reproducible otherwise).

use std::process::Command;

fn run(cmd: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(cmd).args(args).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn main() {
    println!("cargo:rerun-if-env-changed=COURRIER_BUILT_AT");
    if let Some(git_dir) = run("git", &["rev-parse", "--absolute-git-dir"]) {
        for f in ["HEAD", "index", "packed-refs", "refs/heads"] {
            println!("cargo:rerun-if-changed={git_dir}/{f}");
        }
    }
    let commit = run("git", &["rev-parse", "HEAD"]).unwrap_or_default();
    let commit_at = run("git", &["log", "-1", "--format=%cI"]).unwrap_or_default();
    // --no-optional-locks: a plain `git status` refreshes the index file, which this script watches,
    // so every build would make the next one run it again and relink `courrier` (under a test that
    // was running the old binary).
    let dirty = run("git", &["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"])
        .is_some_and(|s| !s.is_empty());
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = run(&rustc, &["--version"]).unwrap_or_default();
    let platform = format!(
        "{}/{}",
        std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default(),
        std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default()
    );
    println!("cargo:rustc-env=COURRIER_COMMIT={commit}");
    println!("cargo:rustc-env=COURRIER_COMMIT_AT={commit_at}");
    println!("cargo:rustc-env=COURRIER_DIRTY={dirty}");
    println!("cargo:rustc-env=COURRIER_RUSTC={rustc_version}");
    println!("cargo:rustc-env=COURRIER_PLATFORM={platform}");
    println!("cargo:rustc-env=COURRIER_BUILT_AT_STAMP={}", std::env::var("COURRIER_BUILT_AT").unwrap_or_default());
}
