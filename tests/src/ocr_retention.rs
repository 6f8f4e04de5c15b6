//! Retention of OCR documents (decisions.md, issue 17): deleted `COURRIER_OCR_RETENTION_DAYS`
//! after their upload by the running server's housekeeping, and at once with their user; the
//! stored file goes when no document names it any more. Real server, real SQLite, the files on disk.

use crate::ocr::{call, expect_refusal, fixture, make_key, make_user, spawn, stored_blobs, upload};
use courrier_core::ocr::documents::OcrId;
use courrier_core::storage::in_read;
use courrier_tests::harness::{TestApp, courrier_bin, run_cli};
use std::time::{Duration, Instant};

/// Uploads a text document (no OCR: fast) and returns its ocrID.
fn upload_text(app: &TestApp, key: &str, text: &str) -> String {
    let resp = upload(app, key, "note.txt", text.as_bytes(), &[("lang", "fr"), ("profile", "raw")]);
    assert_eq!(resp.status, 200, "{}", resp.body);
    resp.json()["ocrID"].as_str().unwrap().to_owned()
}

fn stored(app: &TestApp, id: &str) -> bool {
    let id = OcrId::parse(id).unwrap();
    in_read(&*app.core.ocr.store, |tx| tx.ocr_document(&id)).unwrap().is_some()
}

/// Polls `done` every 100 ms for up to 20 s (the sweep runs every second here).
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A retention of 0.00003 days (2.6 s): the server's sweep (every second at this retention)
/// deletes the document and its file; its GET then answers the contract's not-found.
#[test]
fn a_document_past_its_retention_is_deleted_with_its_file() {
    courrier_bin();
    let app = TestApp::spawn_with(&[("COURRIER_OCR_RETENTION_DAYS", "0.00003")]);
    let user = make_user(&app.core, "ada@example.org");
    let key = make_key(&app.core, &user);
    let id = upload_text(&app, &key, "Facture 2026-042, Total TTC 120,00 EUR");
    let get = format!("/api/ocrs?ocrID={id}");
    assert_eq!(call(&app, "GET", &get, Some(&key), None).status, 200, "kept until its retention");
    assert_eq!(stored_blobs(&app), 1);
    eventually("the document deleted by the sweep", || !stored(&app, &id));
    expect_refusal(&call(&app, "GET", &get, Some(&key), None), 404, "not_found");
    assert_eq!(stored_blobs(&app), 0, "its file removed from disk");
    // Usage stays: counts, no content (decisions.md).
    let stats = call(&app, "GET", "/api/subscriptions/stats/ada@example.org", Some(&key), None);
    assert_eq!(stats.status, 200, "{}", stats.body);
    assert!(stats.body.contains("\"documents\":1"), "{}", stats.body);
}

/// With the default retention (90 days) and with `0` (for ever), a fresh document stays through
/// the sweep at start.
#[test]
fn documents_within_their_retention_or_kept_for_ever_stay() {
    courrier_bin();
    for days in [None, Some("0")] {
        let vars: Vec<(&str, &str)> = days.map(|d| ("COURRIER_OCR_RETENTION_DAYS", d)).into_iter().collect();
        let app = TestApp::spawn_with(&vars);
        let user = make_user(&app.core, "ada@example.org");
        let key = make_key(&app.core, &user);
        let id = upload_text(&app, &key, "Facture 2026-042");
        assert_eq!(app.core.ocr.limits.retention.sweep_every().is_some(), days.is_none());
        assert_eq!(courrier_core::ocr::retention::sweep(&app.core.ocr).unwrap(), 0, "{days:?}");
        assert!(stored(&app, &id));
        assert_eq!(call(&app, "GET", &format!("/api/ocrs?ocrID={id}"), Some(&key), None).status, 200);
    }
}

/// `courrier user delete` (the operator, while the server runs) deletes the user's documents and
/// their files at once; a file another user's document shares stays, with that document.
#[test]
fn deleting_a_user_deletes_their_documents_and_files_but_not_a_file_another_shares() {
    let app = spawn();
    let ada = make_user(&app.core, "ada@example.org");
    let ada_key = make_key(&app.core, &ada);
    let bob = make_user(&app.core, "bob@example.org");
    let bob_key = make_key(&app.core, &bob);
    let scan = fixture("invoice-text.pdf");
    let own = upload_text(&app, &ada_key, "Ada's own note");
    let shared_ada =
        upload(&app, &ada_key, "a.pdf", &scan, &[("lang", "fr")]).json()["ocrID"].as_str().unwrap().to_owned();
    let shared_bob =
        upload(&app, &bob_key, "b.pdf", &scan, &[("lang", "fr")]).json()["ocrID"].as_str().unwrap().to_owned();
    assert_eq!(stored_blobs(&app), 2, "the same PDF is stored once");

    let dir = app.dir.path().display().to_string();
    let (status, out, err) = run_cli(&["--data-dir", &dir, "user", "delete", "--email", "ada@example.org"], &[]);
    assert!(status.success(), "{out}{err}");
    assert!(out.contains("deleted user"), "{out}");

    assert!(!stored(&app, &own) && !stored(&app, &shared_ada), "Ada's documents deleted");
    assert_eq!(stored_blobs(&app), 1, "her own file removed, the shared one kept");
    let bobs = call(&app, "GET", &format!("/api/ocrs?ocrID={shared_bob}"), Some(&bob_key), None);
    assert_eq!(bobs.status, 200, "{}", bobs.body);
    // Her key went with her account.
    let gone = call(&app, "GET", &format!("/api/ocrs?ocrID={own}"), Some(&ada_key), None);
    assert_eq!(gone.status, 401, "{}", gone.body);
    // Bob's document, read back by its file, is whole.
    let page = call(&app, "GET", &format!("/api/ocrs?ocrID={shared_bob}&action=jpegDownload"), Some(&bob_key), None);
    assert_eq!(page.status, 200, "{}", page.body);

    // Deleting an account that is not there is the CLI's not-found.
    let (status, _, err) = run_cli(&["--data-dir", &dir, "user", "delete", "--email", "ada@example.org"], &[]);
    assert!(!status.success());
    assert!(err.contains("not found"), "{err}");
}

/// A retention that is not a number of days from 0 to 36,500 stops the server at start, naming
/// the variable.
#[test]
fn a_bad_retention_is_a_clear_startup_error() {
    for bad in ["-1", "ninety", "1e9", "", "NaN"] {
        let (status, stdout, stderr) = run_cli(&["serve"], &[("COURRIER_OCR_RETENTION_DAYS", bad)]);
        assert_eq!(status.code(), Some(1), "{bad:?}: {stderr}");
        assert!(stdout.is_empty());
        assert!(stderr.starts_with("courrier: COURRIER_OCR_RETENTION_DAYS is not valid"), "{bad:?}: {stderr}");
    }
}
