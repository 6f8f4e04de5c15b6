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

const CRATE_SOURCES: [&str; 10] = [
    "core/src",
    "store-sql/src",
    "store-sqlite/src",
    "store-postgres/src",
    "http-frontend/src",
    "mail-frontend/src",
    "cli/src",
    "tests/src",
    "benches/src",
    "store-sqlite/tests",
];

/// Where adapter libraries may be imported: core's adapters, and the store's adapter crates for
/// their own databases (SQLite; PostgreSQL, which also reads an SQLite file for `store copy`).
const ADAPTER_DIRS: [(&str, &[&str]); 3] = [
    ("core/src/adapters", &ADAPTER_LIBRARIES),
    ("store-sqlite/src", &["rusqlite", "r2d2"]),
    ("store-postgres/src", &["postgres", "r2d2", "rusqlite"]),
];

/// The database crates: no manifest but the store adapters' names one.
const DATABASE_CRATES: [&str; 5] = ["rusqlite", "r2d2", "r2d2_sqlite", "postgres", "r2d2_postgres"];

/// Whether `code` names library `lib` as a path (`lib::x`, `use lib`), not as the end of a longer
/// name (`courrier_store_postgres::` names our crate, not the `postgres` crate).
fn names_library(code: &str, lib: &str) -> bool {
    let as_path = format!("{lib}::");
    code.match_indices(&as_path).any(|(i, _)| !code[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
        || code.contains(&format!("use {lib}"))
}

/// Libraries that reach the outside world: only adapters may import them.
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
fn only_adapters_import_adapter_libraries() {
    let root = workspace_root();
    for dir in CRATE_SOURCES {
        for file in rust_files(&root.join(dir)) {
            let allowed: &[&str] =
                ADAPTER_DIRS.iter().find(|(d, _)| file.starts_with(root.join(d))).map_or(&[], |(_, libs)| libs);
            let code = code_of(&file);
            for lib in ADAPTER_LIBRARIES.into_iter().filter(|lib| !allowed.contains(lib)) {
                // The test client (ureq) is the tests' own; it reaches nothing but 127.0.0.1.
                let tests_client = lib == "ureq" && (dir == "tests/src" || file.ends_with("pipeline_tests.rs"));
                // Benchmarks drive the server over HTTP like a client, and time the same SQL on the
                // same database file as their baseline: measuring instruments, not product code.
                // bench-webhooks' HTTPS receiver is a rustls server of its own.
                let bench_instrument = dir == "benches/src" && (lib == "ureq" || lib == "rusqlite" || lib == "rustls");
                let used = names_library(&code, lib);
                assert!(!used || tests_client || bench_instrument, "{} uses {lib}: only an adapter may", rel(&file));
            }
        }
    }
}

/// Cargo, not a text search, keeps SQL out of the rules: core and the frontends depend on no
/// database crate, and the frontends on no store adapter (the composition root, the CLI, chooses
/// the store; a frontend's own tests may build one).
#[test]
fn only_the_store_crates_depend_on_a_database() {
    let root = workspace_root();
    let dependencies = |manifest: &str| {
        let text = read(&root.join(manifest));
        let deps = text.split("[dependencies]").nth(1).unwrap_or("");
        deps.split("\n[").next().unwrap_or("").to_owned()
    };
    for manifest in [
        "core/Cargo.toml",
        "store-sql/Cargo.toml",
        "http-frontend/Cargo.toml",
        "mail-frontend/Cargo.toml",
        "cli/Cargo.toml",
    ] {
        let deps = dependencies(manifest);
        for lib in DATABASE_CRATES {
            let line = deps.lines().any(|l| l.split(['.', ' ', '=']).next() == Some(lib));
            assert!(!line, "{manifest} depends on {lib}: only the store's adapter crates may");
        }
    }
    for manifest in ["http-frontend/Cargo.toml", "mail-frontend/Cargo.toml"] {
        assert!(!dependencies(manifest).contains("courrier-store"), "{manifest} depends on a store adapter");
    }
}

/// A route calls its context's service, which decides where a write runs (the store's writer
/// thread, or the caller's): no frontend names the storage machinery (stores, transactions, write
/// jobs, the store's errors) nor a store adapter. Their tests may build a real store.
#[test]
fn frontends_name_no_storage_machinery() {
    let root = workspace_root();
    for dir in ["http-frontend/src", "mail-frontend/src"] {
        let is_tests = |f: &PathBuf| f.file_name().is_some_and(|n| n.to_string_lossy().ends_with("tests.rs"));
        for file in rust_files(&root.join(dir)).into_iter().filter(|f| !is_tests(f)) {
            let code = code_of(&file);
            let code = code.split("#[cfg(test)]").next().unwrap_or("");
            for machinery in ["courrier_core::storage", "courrier_store"] {
                assert!(
                    !code.contains(machinery),
                    "{} names {machinery}: a frontend calls its context's service",
                    rel(&file)
                );
            }
        }
    }
}

#[test]
fn frontends_hold_no_sql() {
    let root = workspace_root();
    for dir in ["http-frontend/src", "mail-frontend/src", "cli/src"] {
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

/// The top-level modules of core a file's product code names (`crate::x`): its code up to its
/// `#[cfg(test)]` module, which comes last.
fn core_modules_named(file: &Path) -> Vec<String> {
    let code = code_of(file);
    let code = code.split("#[cfg(test)]").next().unwrap_or("");
    let mut out: Vec<String> = code
        .match_indices("crate::")
        .map(|(i, _)| {
            let rest = &code[i + "crate::".len()..];
            rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>()
        })
        .filter(|m| !m.is_empty())
        .collect();
    // `use crate::{a, b}` names several at once.
    for (i, _) in code.match_indices("crate::{") {
        let rest = &code[i + "crate::{".len()..];
        let inside = &rest[..rest.find('}').unwrap_or(rest.len())];
        out.extend(inside.split(',').map(|p| p.trim().split("::").next().unwrap_or("").to_owned()));
    }
    out.sort();
    out.dedup();
    out
}

/// The floors of core, as the import graph must keep them: the kernel and the storage machinery
/// name no context; access (the shared floor of the other two) names neither mailing nor OCR;
/// mailing and OCR never name each other. So no circle can run between files of different
/// contexts, and no import runs from `storage/` or `kernel/` up into a context.
#[test]
fn contexts_sit_on_their_floors_and_never_name_each_other() {
    let root = workspace_root();
    let rules: [(&str, &[&str]); 5] = [
        ("core/src/kernel", &["access", "mailing", "ocr", "adapters", "storage", "egress", "system", "testing"]),
        ("core/src/storage", &["access", "mailing", "ocr", "adapters", "egress", "system", "testing"]),
        ("core/src/access", &["mailing", "ocr", "adapters", "system"]),
        ("core/src/mailing", &["ocr", "adapters", "system"]),
        ("core/src/ocr", &["mailing", "adapters", "system", "egress"]),
    ];
    for (dir, banned) in rules {
        for file in rust_files(&root.join(dir)) {
            // A unit test may build its world from the real adapters (a SQLite file).
            let is_test = file.ends_with("tests.rs") || file.to_string_lossy().contains("/tests/");
            for module in core_modules_named(&file) {
                let allowed = is_test && module == "adapters";
                assert!(
                    allowed || !banned.contains(&module.as_str()),
                    "{} names crate::{module}: {dir} may not reach that floor or context",
                    rel(&file)
                );
            }
        }
    }
}

/// A context's records (`model.rs`) and its storage port (`ports.rs`) are leaves of that context:
/// they name its value types and no rule file, so the port and the rules depend on the records and
/// never on each other (no circle inside a context either). OCR's port modules for the engine,
/// the blob store and the PDF and image readers hold value types the records carry.
#[test]
fn each_context_s_records_and_port_name_no_rule_file() {
    let root = workspace_root();
    let leaves: [(&str, &[&str]); 3] = [
        ("access", &["model", "ports"]),
        ("mailing", &["model", "ports"]),
        ("ocr", &["model", "ports", "engine", "blobs", "intake", "pdf", "images"]),
    ];
    for (context, allowed) in leaves {
        for leaf in ["model.rs", "ports.rs"] {
            let file = root.join("core/src").join(context).join(leaf);
            let code = code_of(&file);
            let code = code.split("#[cfg(test)]").next().unwrap_or("");
            let mut named: Vec<String> = Vec::new();
            for prefix in ["super::".to_owned(), format!("crate::{context}::")] {
                for (i, _) in code.match_indices(prefix.as_str()) {
                    let rest = &code[i + prefix.len()..];
                    let module: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                    // `super::Name` (a type of the context's root) starts with a capital.
                    if module.starts_with(|c: char| c.is_ascii_lowercase()) {
                        named.push(module);
                    }
                }
            }
            for module in named {
                assert!(
                    allowed.contains(&module.as_str()),
                    "{} names {context}::{module}, a rule file: records and ports must stay leaves",
                    rel(&file)
                );
            }
        }
    }
}

/// One rule, one function: no `x` beside an `x_in` that does the same inside the caller's
/// transaction (a check takes whatever it runs against: `mailing::within::Within`,
/// `access::principal::AuditSink`).
#[test]
fn no_rule_has_a_twin_for_inside_a_transaction() {
    let root = workspace_root();
    let mut names = std::collections::BTreeSet::new();
    for file in rust_files(&root.join("core/src")) {
        let code = code_of(&file);
        for (i, _) in code.match_indices("fn ") {
            let name: String = code[i + 3..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            let rest = &code[i + 3 + name.len()..];
            // A twin for inside a transaction takes one: `tx: &mut dyn Tx`, `tx: &mut X`.
            let signature = &rest[..rest.find('{').unwrap_or(rest.len())];
            if rest.starts_with(['(', '<']) && (!name.ends_with("_in") || signature.contains("tx:")) {
                names.insert(name);
            }
        }
    }
    let twins: Vec<&String> =
        names.iter().filter(|n| n.strip_suffix("_in").is_some_and(|base| names.contains(base))).collect();
    assert!(twins.is_empty(), "functions with an `_in` twin: {twins:?}");
}

/// The service locator is gone: each context's operations take that context's service, and no
/// struct of core gathers every port again.
#[test]
fn no_file_names_a_hub() {
    let root = workspace_root();
    for dir in CRATE_SOURCES {
        for file in rust_files(&root.join(dir)) {
            let code = code_of(&file);
            // Spelled in two halves so that this test's own source does not name what it bans.
            for hub in ["courrier_core::", "crate::", "pub struct "].map(|before| format!("{before}{}", "Courrier")) {
                assert!(!code.contains(&hub), "{} names the retired hub ({hub})", rel(&file));
            }
        }
    }
    let store = read(&root.join("core/src/storage/mod.rs"));
    assert!(!store.contains("pub trait Tx"), "storage/ declares no all-context transaction");
}

/// The CLI administers through core, never through the HTTP frontend: what both print comes from
/// core's views, and requests are parsed by core. Only the server's wiring (`server.rs`) serves HTTP.
#[test]
fn the_cli_administers_without_the_http_frontend() {
    let root = workspace_root();
    for file in rust_files(&root.join("cli/src")).into_iter().filter(|f| !f.ends_with("server.rs")) {
        assert!(!code_of(&file).contains("courrier_http"), "{} uses courrier_http", rel(&file));
    }
}

/// The storage port of each context is its own: one transaction trait per context, extending the
/// kernel's (so a second adapter implements each context's repositories, not one god trait).
#[test]
fn each_context_declares_its_own_transaction() {
    let root = workspace_root();
    for (ctx, base) in [
        ("access", "Transaction + AccessRepo"),
        ("mailing", "crate::access::ports::Tx +"),
        ("ocr", "crate::access::ports::Tx +"),
    ] {
        // Whitespace made single spaces: rustfmt wraps a long list of repositories.
        let ports =
            read(&root.join(format!("core/src/{ctx}/ports.rs"))).split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(ports.contains(&format!("pub trait Tx: {base}")), "core/src/{ctx}/ports.rs: its Tx extends {base}");
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
