//! The `courrier` binary's commands: output, and a clear message with the right exit code on
//! every error.

use courrier_tests::harness::{free_port, run_cli};

#[test]
fn version_json_is_the_contracts_version_object() {
    let (status, stdout, stderr) = run_cli(&["version", "--json"], &[]);
    assert!(status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(v["commit"].as_str().unwrap().len(), 40, "built from a git checkout: {v}");
    assert!(v["dirty"].is_boolean());
    assert!(v["go_version"].as_str().unwrap().starts_with("rustc "), "{v}");
    assert_eq!(v["go_version"], v["rust_version"]);
    assert!(v["platform"].as_str().unwrap().contains('/'));
    let backend = if courrier_tests::harness::on_postgres() { "postgresql " } else { "sqlite 3." };
    assert!(v["backend"].as_str().unwrap().starts_with(backend), "{v}");
    assert!(v["commit_at"].as_str().unwrap().starts_with("20"), "{v}");
}

#[test]
fn version_in_a_fresh_directory_creates_no_data_directory_nor_database() {
    // A newcomer's first command, in a fresh clone: it must leave nothing behind.
    let cwd = tempfile::tempdir().unwrap();
    for args in [&["version"][..], &["version", "--json"][..]] {
        let out = std::process::Command::new(courrier_tests::harness::courrier_bin())
            .args(args)
            .current_dir(cwd.path())
            .env_remove("COURRIER_DATA_DIR")
            .env("COURRIER_LOG", "warn")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("sqlite 3."), "the backend is still named");
    }
    let left: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "version created {left:?}");
    // Nor in a data directory named explicitly that does not exist.
    let missing = cwd.path().join("not-yet");
    let (status, _, stderr) = run_cli(&["--data-dir", missing.to_str().unwrap(), "version"], &[]);
    assert!(status.success(), "{stderr}");
    assert!(!missing.exists());
}

#[test]
fn version_text_is_for_people() {
    let (status, stdout, _) = run_cli(&["version"], &[]);
    assert!(status.success());
    assert!(stdout.starts_with("courrier "), "{stdout}");
    let backend = if courrier_tests::harness::on_postgres() { "backend  postgresql" } else { "backend  sqlite" };
    assert!(stdout.contains(backend), "{stdout}");
}

#[test]
fn a_bad_setting_is_a_clear_error_with_exit_code_1() {
    let (status, stdout, stderr) = run_cli(&["serve"], &[("COURRIER_LISTEN", "not-an-address")]);
    assert_eq!(status.code(), Some(1));
    assert!(stdout.is_empty());
    assert!(stderr.starts_with("courrier: COURRIER_LISTEN is not valid"), "{stderr}");
}

#[test]
fn errors_are_json_on_stderr_with_json() {
    let (status, _, stderr) = run_cli(&["serve", "--json"], &[("COURRIER_LOG_FORMAT", "yaml")]);
    assert_eq!(status.code(), Some(1));
    let e: serde_json::Value = serde_json::from_str(stderr.trim()).unwrap();
    assert_eq!(e["error"]["code"], "validation_failed");
    assert!(e["error"]["message"].as_str().unwrap().contains("COURRIER_LOG_FORMAT"));
}

#[test]
fn a_busy_port_is_unavailable_exit_69() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let (status, _, stderr) = run_cli(&["serve"], &[("COURRIER_LISTEN", &addr)]);
    assert_eq!(status.code(), Some(69), "{stderr}");
    assert!(stderr.contains(&format!("cannot listen on {addr}")), "{stderr}");
}

#[test]
fn an_unusable_data_dir_is_unavailable_exit_69() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let path = file.path().to_str().unwrap();
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let (status, _, stderr) = run_cli(&["--data-dir", path, "serve"], &[("COURRIER_LISTEN", &listen)]);
    assert_eq!(status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("cannot prepare the data directory"), "{stderr}");
}

#[test]
fn a_database_that_is_not_one_is_unavailable_exit_69() {
    if courrier_tests::harness::skip_on_postgres("writes garbage into the SQLite file") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("courrier.db"), vec![b'x'; 4096]).unwrap();
    let (status, _, stderr) =
        run_cli(&["--data-dir", dir.path().to_str().unwrap(), "user", "create", "--email", "a@example.org"], &[]);
    assert_eq!(status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("courrier.db"), "{stderr}");
}

#[test]
fn usage_errors_are_clap_exit_2() {
    let (status, _, stderr) = run_cli(&["no-such-command"], &[]);
    assert_eq!(status.code(), Some(2));
    assert!(stderr.contains("no-such-command"), "{stderr}");
}

#[test]
fn a_database_url_that_is_not_postgres_is_a_clear_error() {
    let (status, _, stderr) = run_cli(&["serve"], &[("COURRIER_DATABASE_URL", "mysql://root@127.0.0.1/courrier")]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("courrier: COURRIER_DATABASE_URL is not valid"), "{stderr}");
}
