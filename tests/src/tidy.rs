//! The architecture's invariants as tests (rust-analyzer's `tidy.rs`): they read the sources.

use courrier_tests::harness::workspace_root;
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

/// Code only: line comments and doc comments dropped, so prose may name what code may not use.
fn code_of(path: &Path) -> String {
    read(path)
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| l.split(" // ").next().unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n")
}

fn rel(path: &Path) -> String {
    path.strip_prefix(workspace_root()).unwrap_or(path).display().to_string()
}

const CRATE_SOURCES: [&str; 5] = ["core/src", "http-frontend/src", "cli/src", "tests/src", "benches/src"];

/// Libraries that reach the outside world: only core's adapters may import them.
const ADAPTER_LIBRARIES: [&str; 19] = [
    "rusqlite",
    "r2d2",
    "lettre",
    "mail_send",
    "mail_auth",
    "hickory",
    "ureq",
    "tesseract",
    "lopdf",
    "hayro",
    "imap",
    "postgres",
    "rustls",
    "mail_builder",
    "mail_parser",
    "jpeg_encoder",
    "image",
    "rlimit",
    "flate2",
];

#[test]
fn core_rules_use_no_async_and_no_http_types() {
    let root = workspace_root();
    let adapters = root.join("core/src/adapters");
    for file in rust_files(&root.join("core/src")).into_iter().filter(|f| !f.starts_with(&adapters)) {
        let code = code_of(&file);
        for banned in ["async ", ".await", "tokio", "hyper", "axum", "http::", "futures"] {
            assert!(
                !code.contains(banned),
                "{} uses {banned:?}: core's rules are synchronous and HTTP-free",
                rel(&file)
            );
        }
    }
}

#[test]
fn only_core_adapters_import_adapter_libraries() {
    let root = workspace_root();
    let adapters = root.join("core/src/adapters");
    for dir in CRATE_SOURCES {
        for file in rust_files(&root.join(dir)).into_iter().filter(|f| !f.starts_with(&adapters)) {
            let code = code_of(&file);
            for lib in ADAPTER_LIBRARIES {
                // The test client (ureq) is the tests' own; it reaches nothing but 127.0.0.1.
                let tests_client = lib == "ureq" && (dir == "tests/src" || file.ends_with("pipeline_tests.rs"));
                // Benchmarks drive the server over HTTP like a client, and time the same SQL on the
                // same database file as their baseline: measuring instruments, not product code.
                // bench-webhooks' HTTPS receiver is a rustls server of its own.
                let bench_instrument = dir == "benches/src" && (lib == "ureq" || lib == "rusqlite" || lib == "rustls");
                let used = code.contains(&format!("{lib}::")) || code.contains(&format!("use {lib}"));
                assert!(
                    !used || tests_client || bench_instrument,
                    "{} uses {lib}: only core/src/adapters/ may",
                    rel(&file)
                );
            }
        }
    }
    for manifest in ["http-frontend/Cargo.toml", "cli/Cargo.toml"] {
        let text = read(&root.join(manifest));
        for lib in ["rusqlite", "r2d2"] {
            assert!(!text.contains(lib), "{manifest} depends on {lib}");
        }
    }
}

#[test]
fn frontends_hold_no_sql() {
    let root = workspace_root();
    for dir in ["http-frontend/src", "cli/src"] {
        for file in rust_files(&root.join(dir)) {
            let code = code_of(&file).to_uppercase();
            for sql in ["SELECT ", "INSERT INTO", "UPDATE ", "DELETE FROM", "CREATE TABLE"] {
                assert!(!code.contains(sql), "{} holds SQL ({sql:?}): SQL stays in the storage adapter", rel(&file));
            }
        }
    }
}

#[test]
fn core_domain_types_carry_no_serde_derives() {
    let root = workspace_root();
    for file in rust_files(&root.join("core/src")) {
        for (n, line) in code_of(&file).lines().enumerate() {
            let derive = line.contains("derive(") && (line.contains("Serialize") || line.contains("Deserialize"));
            assert!(!derive, "{}:{}: domain types carry no serde derives; map them in the frontend", rel(&file), n + 1);
        }
    }
}

#[test]
fn mailing_and_ocr_never_import_each_other() {
    let root = workspace_root();
    for (dir, other) in [("core/src/mailing", "ocr"), ("core/src/ocr", "mailing")] {
        let dir = root.join(dir);
        if !dir.exists() {
            continue;
        }
        for file in rust_files(&dir) {
            let code = code_of(&file);
            assert!(!code.contains(&format!("crate::{other}")), "{} imports {other}", rel(&file));
        }
    }
}

/// The body of `fn name` in `file`, up to the closing brace at the start of a line.
fn function_body(file: &str, name: &str) -> String {
    let text = read(&workspace_root().join(file));
    let start = text.find(&format!("fn {name}(")).unwrap_or_else(|| panic!("no fn {name} in {file}"));
    let rest = &text[start..];
    rest[..rest.find("\n}").unwrap()].to_owned()
}

#[test]
fn status_and_exit_code_mappings_are_exhaustive_without_wildcards() {
    for (file, name) in [("http-frontend/src/error.rs", "status_of"), ("cli/src/error.rs", "exit_code")] {
        let body = function_body(file, name);
        assert!(!body.contains("_ =>"), "{file}: {name} has a wildcard arm");
        assert!(body.contains("match kind"), "{file}: {name} no longer matches on the kind");
    }
}

/// Every `.rs` file of every crate is a module somebody declares: a file nobody declares is
/// never compiled, and its tests never run.
#[test]
fn every_source_file_is_a_declared_module() {
    let root = workspace_root();
    for dir in CRATE_SOURCES {
        let files = rust_files(&root.join(dir));
        let declared: String = files.iter().map(|f| code_of(f)).collect::<Vec<_>>().join("\n");
        for file in &files {
            let stem = file.file_stem().unwrap().to_str().unwrap();
            let is_root = matches!(stem, "lib" | "main" | "mod") || file.parent().is_some_and(|p| p.ends_with("bin"));
            if is_root {
                continue;
            }
            let declared_here =
                declared.contains(&format!("mod {stem};")) || declared.contains(&format!("mod {stem} {{"));
            assert!(declared_here, "{} is not declared as a module anywhere", rel(file));
        }
    }
}
