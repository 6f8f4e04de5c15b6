//! PDF bombs and the PDF sandbox's shared limits (issue 16): a tiny PDF declaring a huge image is
//! refused from its declared size, several at once never run more sandbox processes than the cap,
//! and a helper killed at its deadline leaves no copy of the document in the temporary directory.

use crate::ocr::{expect_refusal, upload, upload_with, user_key};
use courrier_benches::pdf::{bomb, pdf};
use courrier_tests::harness::{Client, TestApp, courrier_bin};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

/// A page of `lines` stroked lines: no image, honest, and slow to render at 300 dpi.
fn heavy_page(pages: usize, lines: usize) -> Vec<u8> {
    let mut content = Vec::new();
    for i in 0..lines {
        content.extend_from_slice(format!("{} 0 m {} 842 l S\n", i % 595, (i * 7) % 595).as_bytes());
    }
    pdf(pages, &content, None)
}

#[test]
fn a_tiny_pdf_declaring_a_ten_gigapixel_image_is_refused_as_too_complex() {
    courrier_bin();
    let app = TestApp::spawn();
    let key = user_key(&app, "ada@example.org");
    let one = bomb(1);
    assert!(one.len() < 1024, "{} bytes", one.len());
    for (name, bytes, fields) in [
        ("bomb.pdf", one.clone(), vec![("lang", "fr")]),
        ("bomb-invoice.pdf", one.clone(), vec![("lang", "fr"), ("profile", "invoice")]),
        ("bomb-5.pdf", bomb(5), vec![("lang", "fr"), ("profile", "raw")]),
        ("bomb-store.pdf", one, vec![("lang", "fr"), ("action", "storeOnly")]),
    ] {
        let resp = upload(&app, &key, name, &bytes, &fields);
        expect_refusal(&resp, 422, "document_too_complex");
        assert!(resp.body.contains("pixels"), "{name}: the refusal names its reason: {}", resp.body);
    }
}

/// Sandbox processes (`<courrier> sandbox ...`) whose parent is this process, the test server's.
fn sandbox_children() -> usize {
    let me = std::process::id().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .filter(|e| {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1).map(str::to_owned));
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            ppid.as_deref() == Some(me.as_str()) && cmdline.split(|b| *b == 0).nth(1) == Some(b"sandbox")
        })
        .count()
}

#[test]
fn several_bombs_and_slow_pages_at_once_never_run_more_sandbox_processes_than_the_cap() {
    courrier_bin();
    let app = TestApp::spawn_with(&[("COURRIER_OCR_HELPERS", "1"), ("COURRIER_OCR_WORKERS", "4")]);
    let key = user_key(&app, "ada@example.org");
    let (slow, bomb) = (heavy_page(1, 1_500), bomb(2));
    // Six uploads queue for one sandbox: the last waits for the five before it, longer than the
    // default client's 30 s on a loaded machine.
    let patient = Client::with_timeout(app.addr, Duration::from_secs(600));
    let done = AtomicBool::new(false);
    let peak = AtomicUsize::new(0);
    let statuses: Vec<(u16, String)> = std::thread::scope(|s| {
        s.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(sandbox_children(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        let uploads: Vec<_> = (0..6)
            .map(|i| {
                let (patient, key) = (&patient, &key);
                let (name, bytes) = if i % 2 == 0 { ("slow.pdf", &slow) } else { ("bomb.pdf", &bomb) };
                s.spawn(move || {
                    let r = upload_with(patient, key, name, bytes, &[("lang", "fr"), ("action", "storeOnly")]);
                    (r.status, r.body)
                })
            })
            .collect();
        let joined: Vec<_> = uploads.into_iter().map(|u| u.join()).collect();
        // Stop the watcher before a failed upload's panic is passed on: the scope waits for every
        // thread, so a panic while it still ran hung the test instead of failing it.
        done.store(true, Ordering::Relaxed);
        joined.into_iter().map(|j| j.unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    });
    for (i, (status, body)) in statuses.iter().enumerate() {
        let expected = if i % 2 == 0 { 200 } else { 422 };
        assert_eq!(*status, expected, "upload {i}: {body}");
    }
    let peak = peak.load(Ordering::Relaxed);
    assert_eq!(peak, 1, "sandbox processes seen at once: {peak}, the cap is 1");
}

/// Scratch folders (`courrier-sandbox-*`) in the temporary directory that this process's server
/// made (named with its pid) or that carry no pid (made by a child, as before issue 16).
fn scratch_folders_of_this_process() -> Vec<PathBuf> {
    let mine = format!("courrier-sandbox-{}-", std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(&mine) || name.strip_prefix("courrier-sandbox-").is_some_and(|rest| !rest.contains('-'))
        })
        .map(|e| e.path())
        .collect()
}

#[test]
fn a_sandbox_killed_at_the_document_deadline_leaves_no_copy_of_the_document_behind() {
    courrier_bin();
    let before = scratch_folders_of_this_process();
    let app = TestApp::spawn_with(&[("COURRIER_OCR_DOCUMENT_SECS", "1")]);
    let key = user_key(&app, "ada@example.org");
    // Its rendering takes seconds of CPU: the sandbox is killed at the 1 s deadline.
    let resp = upload(&app, &key, "slow.pdf", &heavy_page(1, 20_000), &[("lang", "fr")]);
    expect_refusal(&resp, 422, "document_too_complex");
    let left: Vec<PathBuf> = scratch_folders_of_this_process().into_iter().filter(|p| !before.contains(p)).collect();
    assert!(left.is_empty(), "scratch folders left behind: {left:?}");
}
