//! PDFs are read in a child process, `courrier sandbox`, never in the server: lopdf overflows its
//! stack on 200,000 nested arrays (an abort that `catch_unwind` cannot stop) and inflates a
//! compressed stream whole. The child runs under resource limits (address space, CPU time, file
//! size, no core dumps) set on itself before it reads a byte; the parent bounds its wall time
//! and the size of its answer. A child that dies or exceeds a limit is a clear 4xx for the
//! client and nothing for the server.
//!
//! In the child: lopdf parses the structure (encryption, page count, whether a page only draws
//! one JPEG), poppler's `pdftotext -layout` takes the text layer (invoice templates were written
//! against its layout: invoice2data's templates found 85.9% of fields with it against at most 43%
//! with other extractors), and `pdftoppm` renders scanned pages that are not a single JPEG. Both
//! poppler tools run as children of the child and inherit its limits.
//!
//! Protocol: `courrier sandbox content <max_pages>`, `courrier sandbox page <n>` or `courrier
//! sandbox xml`; the PDF on stdin; on stdout a count record then page records, each a tag byte and
//! a length-prefixed body: `N` page count (u32), `T` text, `J` JPEG bytes, `G` width (u32) height
//! (u32) and gray pixels, `X` an embedded invoice XML, `E` an error kind byte and message.
//! Integers are big-endian; lengths are u64.
//!
//! PDF bombs (issue 16: a 1.7 KB PDF drawing one image declared 100,000 x 100,000 pixels took
//! 13-14 s a page): the child sums the pixels the pages' images *declare* before anything decodes
//! them and refuses a page or a document over its budget at once. `courrier sandbox document`
//! reads a document's embedded invoice and its pages in one process: one deadline (the parent's
//! wall time, counted from the request, waiting for a helper slot included) and one CPU budget
//! for the document, which the poppler tools it runs page after page draw from (each is started
//! with what is left). At most `max_helpers` children run at once, whatever the number of
//! requests. The scratch folder that holds the PDF for poppler is made and removed by the parent,
//! so a child killed at its limit leaves nothing behind; the server sweeps the folders of dead
//! servers when it starts.

use crate::ocr::engine::GrayImage;
use crate::ocr::pdf::{PdfError, PdfPage, PdfReader};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Limits of the child. Address space bounds what a bomb can inflate; CPU time what a pathological
/// file can cost; the wall time (parent side) what a stuck child can hold a request.
#[derive(Debug, Clone, Copy)]
pub struct SandboxLimits {
    pub address_space_bytes: u64,
    pub cpu_seconds: u64,
    pub file_size_bytes: u64,
    pub wall_time: Duration,
    pub max_output_bytes: u64,
    /// Sandbox children running at once, shared by all requests; the others wait their turn
    /// within their wall time.
    pub max_helpers: usize,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        Self {
            // The binary's allocator (mimalloc) reserves a 1 GiB arena up front, which counts here: at
            // 1 GiB, the child could not even start pdftotext. 1.5 GiB leaves ~0.4 GiB beyond it.
            address_space_bytes: 1536 * 1024 * 1024,
            cpu_seconds: 30,
            file_size_bytes: 64 * 1024 * 1024,
            wall_time: Duration::from_secs(60),
            // 50 pages rendered at the pixel cap below would be 2 GB: scanned pages come back as
            // JPEGs when they are, and documents this large are refused rather than held in memory.
            max_output_bytes: 512 * 1024 * 1024,
            max_helpers: 2,
        }
    }
}

/// Decompression bombs: a FlateDecode stream may inflate to at most this, and all of a document's
/// streams together to at most `MAX_INFLATED_TOTAL`. Checked with a bounded inflater before lopdf
/// decodes anything or poppler reads the file (poppler inflated a 1 GiB stream of spaces twice,
/// once for text and once to render, in 22 s of CPU). A 600 dpi colour A4 scan is ~100 MB raw.
const MAX_INFLATED_STREAM: u64 = 256 * 1024 * 1024;
const MAX_INFLATED_TOTAL: u64 = 512 * 1024 * 1024;

/// A rendered page holds at most this many pixels (300 dpi, lowered for oversized pages).
const MAX_RENDER_PIXELS: f64 = 40_000_000.0;
const RENDER_DPI: f64 = 300.0;

/// The pixels a page's images may declare (a 1,200 dpi A4 colour scan is 140 million) and all of a
/// document's pages together: checked from the images' `/Width` and `/Height` before anything is
/// decoded; over either, the document is refused.
pub const MAX_PAGE_DECLARED_PIXELS: u64 = 150_000_000;
pub const MAX_DOCUMENT_DECLARED_PIXELS: u64 = 1_000_000_000;

/// The prefix of the scratch folders in the temporary directory: `courrier-sandbox-<server pid>-<random>`.
const SCRATCH_PREFIX: &str = "courrier-sandbox-";

// ---------------------------------------------------------------------------------------------
// Parent side.

/// The [`PdfReader`] that runs `<exe> sandbox ...` for each document.
pub struct SandboxedPdfReader {
    exe: PathBuf,
    limits: SandboxLimits,
    helpers: HelperSlots,
}

/// The cap on sandbox children running at once: a counting semaphore that waits with a deadline.
#[derive(Default)]
struct HelperSlots {
    state: std::sync::Mutex<HelperCount>,
    freed: std::sync::Condvar,
}

#[derive(Default)]
struct HelperCount {
    running: usize,
    peak: usize,
}

/// A helper slot, given back when dropped.
struct HelperSlot<'a>(&'a HelperSlots);

impl HelperSlots {
    fn acquire(&self, cap: usize, deadline: Instant) -> Option<HelperSlot<'_>> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while state.running >= cap.max(1) {
            let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
            state = self.freed.wait_timeout(state, left).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
        state.running += 1;
        state.peak = state.peak.max(state.running);
        Some(HelperSlot(self))
    }
}

impl Drop for HelperSlot<'_> {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        state.running -= 1;
        drop(state);
        self.0.freed.notify_one();
    }
}

impl SandboxedPdfReader {
    /// `exe` is the `courrier` binary (the server's own executable in production).
    pub fn new(exe: PathBuf, limits: SandboxLimits) -> Self {
        Self { exe, limits, helpers: HelperSlots::default() }
    }

    /// The most sandbox children that ever ran at once (never more than `max_helpers`).
    pub fn peak_helpers(&self) -> usize {
        self.helpers.state.lock().map_or(0, |s| s.peak)
    }

    fn run(&self, args: &[String], pdf: &[u8]) -> Result<Vec<Record>, PdfError> {
        let limits = &self.limits;
        // One deadline for the document, its wait for a helper slot included.
        let started = Instant::now();
        let deadline = started + limits.wall_time;
        let _slot = self.helpers.acquire(limits.max_helpers, deadline).ok_or_else(|| {
            PdfError::Unavailable(format!(
                "every PDF reader stayed busy for {} s; try again later",
                limits.wall_time.as_secs()
            ))
        })?;
        // Made here, removed here on every path (the guard's drop), whatever becomes of the child.
        let scratch = ScratchDir::new()?;
        use std::os::unix::process::CommandExt;
        let mut child = Command::new(&self.exe)
            // Its own process group: killed at the deadline, the poppler tool it runs goes with it.
            .process_group(0)
            .arg("sandbox")
            .args(args)
            .env("COURRIER_SANDBOX_AS", limits.address_space_bytes.to_string())
            .env("COURRIER_SANDBOX_CPU", limits.cpu_seconds.to_string())
            .env("COURRIER_SANDBOX_FSIZE", limits.file_size_bytes.to_string())
            .env("COURRIER_SANDBOX_SCRATCH", scratch.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| PdfError::Unavailable(format!("cannot start {} sandbox: {e}", self.exe.display())))?;
        let (mut stdin, mut stdout, mut stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
        let outcome = std::thread::scope(|s| {
            // Written from its own thread: a child that stops reading must not block us.
            s.spawn(move || {
                if let Some(mut w) = stdin.take() {
                    let _ = w.write_all(pdf);
                }
            });
            let max = limits.max_output_bytes;
            let out = s.spawn(move || {
                let mut buf = Vec::new();
                if let Some(r) = stdout.take() {
                    let _ = r.take(max + 1).read_to_end(&mut buf);
                }
                buf
            });
            let err = s.spawn(move || {
                let mut buf = Vec::new();
                if let Some(r) = stderr.take() {
                    let _ = r.take(16 * 1024).read_to_end(&mut buf);
                }
                buf
            });
            let status = wait_until(&mut child, deadline);
            let out = out.join().unwrap_or_default();
            let err = err.join().unwrap_or_default();
            (status, out, err)
        });
        let (status, out, err) = outcome;
        let stderr_text = String::from_utf8_lossy(&err);
        let status = status.map_err(|e| PdfError::Unavailable(format!("waiting for the sandbox: {e}")))?;
        let Some(status) = status else {
            tracing::warn!(stderr = %stderr_text, "PDF sandbox killed after its wall time");
            return Err(PdfError::LimitExceeded(format!("took longer than {} s", limits.wall_time.as_secs_f64())));
        };
        if out.len() as u64 > limits.max_output_bytes {
            return Err(PdfError::LimitExceeded("its output is too large".into()));
        }
        if !status.success() {
            // An error record is an orderly refusal; anything else is a death (signal, abort).
            if let Ok(records) = parse_records(&out)
                && let Some(Record::Error(e)) = records.into_iter().find(|r| matches!(r, Record::Error(_)))
            {
                return Err(e);
            }
            tracing::warn!(status = %status, stderr = %stderr_text, "PDF sandbox died");
            return Err(PdfError::LimitExceeded(describe_death(status)));
        }
        let records = parse_records(&out).map_err(|e| PdfError::Unreadable(format!("sandbox answer: {e}")))?;
        if let Some(Record::Error(e)) = records.iter().find(|r| matches!(r, Record::Error(_))) {
            return Err(e.clone());
        }
        Ok(records)
    }
}

/// `Some(status)` when the child ended in time; `None` when it was killed at the deadline.
fn wait_until(child: &mut std::process::Child, deadline: Instant) -> std::io::Result<Option<ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ =
                Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).stderr(Stdio::null()).status();
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn describe_death(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status.signal() {
        Some(9) => "killed (CPU time or memory)".into(),
        Some(24) => "out of CPU time".into(),
        Some(6) => "aborted (memory or stack exhausted)".into(),
        Some(11) => "crashed (stack exhausted)".into(),
        Some(n) => format!("killed by signal {n}"),
        None => format!("exited with {status}"),
    }
}

impl PdfReader for SandboxedPdfReader {
    fn content(&self, pdf: &[u8], max_pages: u32) -> Result<Vec<PdfPage>, PdfError> {
        let records = self.run(&["content".into(), max_pages.to_string()], pdf)?;
        Ok(records.into_iter().filter_map(Record::into_page).collect())
    }

    fn document(&self, pdf: &[u8], max_pages: u32) -> Result<(Option<Vec<u8>>, Vec<PdfPage>), PdfError> {
        let records = self.run(&["document".into(), max_pages.to_string()], pdf)?;
        let mut xml = None;
        let mut pages = Vec::new();
        for r in records {
            match r {
                Record::Xml(x) => xml = Some(x),
                Record::Page(p) => pages.push(p),
                Record::Count(_) | Record::Error(_) => {}
            }
        }
        Ok((xml, pages))
    }

    fn page_image(&self, pdf: &[u8], page: u32) -> Result<(u32, PdfPage), PdfError> {
        let records = self.run(&["page".into(), page.to_string()], pdf)?;
        let count = records.iter().find_map(|r| if let Record::Count(n) = r { Some(*n) } else { None });
        let image = records.into_iter().find_map(Record::into_page);
        match (count, image) {
            (Some(n), Some(p)) => Ok((n, p)),
            _ => Err(PdfError::Unreadable("the sandbox returned no page".into())),
        }
    }

    fn invoice_xml(&self, pdf: &[u8]) -> Result<Option<Vec<u8>>, PdfError> {
        let records = self.run(&["xml".into()], pdf)?;
        Ok(records.into_iter().find_map(|r| if let Record::Xml(x) = r { Some(x) } else { None }))
    }
}

// ---------------------------------------------------------------------------------------------
// The wire format, both sides.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Record {
    Count(u32),
    Page(PdfPage),
    Xml(Vec<u8>),
    Error(PdfError),
}

impl Record {
    fn into_page(self) -> Option<PdfPage> {
        if let Record::Page(p) = self { Some(p) } else { None }
    }
}

fn write_record(out: &mut impl Write, r: &Record) -> std::io::Result<()> {
    let (tag, body): (u8, Vec<u8>) = match r {
        Record::Count(n) => (b'N', n.to_be_bytes().to_vec()),
        Record::Page(PdfPage::Text(t)) => (b'T', t.as_bytes().to_vec()),
        Record::Page(PdfPage::Jpeg(j)) => (b'J', j.clone()),
        Record::Xml(x) => (b'X', x.clone()),
        Record::Page(PdfPage::Rendered(g)) => {
            let mut b = Vec::with_capacity(8 + g.pixels().len());
            b.extend_from_slice(&g.width().to_be_bytes());
            b.extend_from_slice(&g.height().to_be_bytes());
            b.extend_from_slice(g.pixels());
            (b'G', b)
        }
        Record::Error(e) => {
            let (kind, msg) = match e {
                PdfError::Encrypted => (1u8, String::new()),
                PdfError::Unreadable(m) => (2, m.clone()),
                PdfError::LimitExceeded(m) => (3, m.clone()),
                PdfError::TooManyPages { pages, max } => (4, format!("{pages} {max}")),
                PdfError::NoSuchPage(n) => (5, n.to_string()),
                PdfError::Unavailable(m) => (6, m.clone()),
            };
            let mut b = vec![kind];
            b.extend_from_slice(msg.as_bytes());
            (b'E', b)
        }
    };
    out.write_all(&[tag])?;
    out.write_all(&(body.len() as u64).to_be_bytes())?;
    out.write_all(&body)
}

fn parse_records(mut buf: &[u8]) -> Result<Vec<Record>, String> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        if buf.len() < 9 {
            return Err("truncated record header".into());
        }
        let tag = buf[0];
        let len = u64::from_be_bytes(buf[1..9].try_into().map_err(|_| "length")?);
        let len = usize::try_from(len).map_err(|_| "length")?;
        let body = buf.get(9..9usize.saturating_add(len)).ok_or("truncated record")?;
        buf = &buf[9 + len..];
        let u32_at = |i: usize| body.get(i..i + 4).and_then(|b| b.try_into().ok()).map(u32::from_be_bytes);
        out.push(match tag {
            b'N' => Record::Count(u32_at(0).ok_or("count")?),
            b'T' => Record::Page(PdfPage::Text(String::from_utf8_lossy(body).into_owned())),
            b'J' => Record::Page(PdfPage::Jpeg(body.to_vec())),
            b'X' => Record::Xml(body.to_vec()),
            b'G' => {
                let (w, h) = (u32_at(0).ok_or("width")?, u32_at(4).ok_or("height")?);
                let image = GrayImage::new(w, h, body[8..].to_vec()).ok_or("pixels do not match the size")?;
                Record::Page(PdfPage::Rendered(image))
            }
            b'E' => {
                let (&kind, msg) = body.split_first().ok_or("error kind")?;
                let msg = String::from_utf8_lossy(msg).into_owned();
                Record::Error(match kind {
                    1 => PdfError::Encrypted,
                    2 => PdfError::Unreadable(msg),
                    3 => PdfError::LimitExceeded(msg),
                    4 => {
                        let mut it = msg.split(' ').map(|n| n.parse().unwrap_or(0));
                        PdfError::TooManyPages { pages: it.next().unwrap_or(0), max: it.next().unwrap_or(0) }
                    }
                    5 => PdfError::NoSuchPage(msg.parse().unwrap_or(0)),
                    _ => PdfError::Unavailable(msg),
                })
            }
            other => return Err(format!("unknown record tag {other}")),
        });
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Child side.

/// The `courrier sandbox` subcommand: limits itself, reads the PDF from stdin, answers on stdout.
/// Returns the process exit code.
pub fn child_main(args: &[String]) -> u8 {
    if let Err(e) = limit_self() {
        eprintln!("sandbox: cannot set resource limits: {e}");
        return 3;
    }
    let mut pdf = Vec::new();
    if let Err(e) = std::io::stdin().lock().read_to_end(&mut pdf) {
        eprintln!("sandbox: cannot read the document: {e}");
        return 3;
    }
    let result = match args {
        [mode, n] if mode == "content" => n.parse().map_err(|_| bad_args()).and_then(|max| content(&pdf, max)),
        [mode, n] if mode == "document" => n.parse().map_err(|_| bad_args()).and_then(|max| {
            // Parsed once for both (a 300 dpi scan is ~1 MB of PDF).
            let doc = load(&pdf)?;
            let mut records: Vec<Record> =
                super::pdf_attachments::invoice_xml(&doc)?.map(Record::Xml).into_iter().collect();
            records.extend(content_of(&doc, &pdf, max)?);
            Ok(records)
        }),
        [mode, n] if mode == "page" => n.parse().map_err(|_| bad_args()).and_then(|page| page_image(&pdf, page)),
        [mode] if mode == "xml" => invoice_xml(&pdf),
        _ => Err(bad_args()),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let (records, code) = match result {
        Ok(records) => (records, 0),
        Err(e) => (vec![Record::Error(e)], 2),
    };
    for r in &records {
        if write_record(&mut out, r).is_err() {
            return 3;
        }
    }
    if out.flush().is_err() { 3 } else { code }
}

fn bad_args() -> PdfError {
    PdfError::Unavailable("usage: courrier sandbox content <max_pages> | document <max_pages> | page <n> | xml".into())
}

fn limit_self() -> std::io::Result<()> {
    use rlimit::Resource;
    let get = |var: &str, default: u64| std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    let d = SandboxLimits::default();
    let cpu = get("COURRIER_SANDBOX_CPU", d.cpu_seconds);
    Resource::AS
        .set(get("COURRIER_SANDBOX_AS", d.address_space_bytes), get("COURRIER_SANDBOX_AS", d.address_space_bytes))?;
    // SIGXCPU at the soft limit, SIGKILL a second later.
    Resource::CPU.set(cpu, cpu + 1)?;
    Resource::FSIZE
        .set(get("COURRIER_SANDBOX_FSIZE", d.file_size_bytes), get("COURRIER_SANDBOX_FSIZE", d.file_size_bytes))?;
    Resource::CORE.set(0, 0)?;
    Ok(())
}

/// The parent's scratch folder for one child: `<tmp>/courrier-sandbox-<pid>-<random>`, owner-only,
/// removed when dropped (the child may have been killed; this side always runs).
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new() -> Result<Self, PdfError> {
        let name = format!("{SCRATCH_PREFIX}{}-{}", std::process::id(), crate::kernel::secrets::random_hex(8));
        let dir = std::env::temp_dir().join(name);
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| PdfError::Unavailable(format!("scratch folder: {e}")))?;
        Ok(Self(dir))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Removes the scratch folders that servers no longer running left in the temporary directory (a
/// server killed while a child ran): those named after a process that is gone, and those of the
/// older unnamed form after an hour. Another running server's folders are kept. Returns how many
/// were removed.
pub fn sweep_stale_scratch() -> usize {
    sweep_stale_scratch_in(&std::env::temp_dir())
}

fn sweep_stale_scratch_in(tmp: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(tmp) else { return 0 };
    let me = std::process::id();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(SCRATCH_PREFIX)) else { continue };
        let stale = match rest.split_once('-').and_then(|(pid, _)| pid.parse::<u32>().ok()) {
            Some(pid) => pid != me && !Path::new(&format!("/proc/{pid}")).exists(),
            None => entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > Duration::from_secs(3600))),
        };
        if stale && entry.file_type().is_ok_and(|t| t.is_dir()) && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// The poppler tools' input: `in.pdf` in the folder the parent made (`COURRIER_SANDBOX_SCRATCH`),
/// or, run by hand, in a private folder of its own, removed when dropped.
struct Scratch {
    dir: PathBuf,
    owned: bool,
}

impl Scratch {
    fn new(pdf: &[u8]) -> Result<Self, PdfError> {
        let fail = |e: std::io::Error| PdfError::Unavailable(format!("scratch file: {e}"));
        let scratch = match std::env::var_os("COURRIER_SANDBOX_SCRATCH") {
            Some(dir) => Scratch { dir: PathBuf::from(dir), owned: false },
            None => {
                let dir = std::env::temp_dir().join(format!(
                    "{SCRATCH_PREFIX}{}-{}",
                    std::process::id(),
                    crate::kernel::secrets::random_hex(8)
                ));
                use std::os::unix::fs::DirBuilderExt;
                std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(fail)?;
                Scratch { dir, owned: true }
            }
        };
        std::fs::write(scratch.pdf(), pdf).map_err(fail)?;
        Ok(scratch)
    }

    fn pdf(&self) -> PathBuf {
        self.dir.join("in.pdf")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = if self.owned { std::fs::remove_dir_all(&self.dir) } else { std::fs::remove_file(self.pdf()) };
    }
}

fn load(pdf: &[u8]) -> Result<lopdf::Document, PdfError> {
    match lopdf::Document::load_mem(pdf) {
        Ok(doc) if doc.trailer.get(b"Encrypt").is_ok() || doc.was_encrypted() => Err(PdfError::Encrypted),
        Ok(doc) => {
            check_inflated_sizes(&doc)?;
            Ok(doc)
        }
        // lopdf may refuse an encrypted file it cannot decrypt before we can ask.
        Err(_) if pdf.windows(8).any(|w| w == b"/Encrypt") => Err(PdfError::Encrypted),
        Err(e) => Err(PdfError::Unreadable(e.to_string())),
    }
}

/// Inflates every FlateDecode stream into a sink, stopping at the caps.
fn check_inflated_sizes(doc: &lopdf::Document) -> Result<(), PdfError> {
    let mut total: u64 = 0;
    for object in doc.objects.values() {
        let Ok(stream) = object.as_stream() else { continue };
        let flate = match stream.dict.get(b"Filter") {
            Ok(lopdf::Object::Name(n)) => n.as_slice() == b"FlateDecode",
            Ok(lopdf::Object::Array(a)) => a.iter().any(|f| f.as_name().is_ok_and(|n| n == b"FlateDecode")),
            _ => false,
        };
        if !flate {
            continue;
        }
        let mut inflater = flate2::read::ZlibDecoder::new(stream.content.as_slice()).take(MAX_INFLATED_STREAM + 1);
        // A corrupt stream counts for what it inflated before the error: poppler decides about it.
        let n = std::io::copy(&mut inflater, &mut std::io::sink()).unwrap_or(0);
        if n > MAX_INFLATED_STREAM {
            return Err(PdfError::LimitExceeded(format!(
                "a compressed stream inflates to more than {} MiB",
                MAX_INFLATED_STREAM >> 20
            )));
        }
        total += n;
        if total > MAX_INFLATED_TOTAL {
            return Err(PdfError::LimitExceeded(format!(
                "its streams inflate to more than {} MiB",
                MAX_INFLATED_TOTAL >> 20
            )));
        }
    }
    Ok(())
}

/// CPU seconds (user + system) used so far by this process and by its finished children, from
/// `/proc/self/stat` (in clock ticks of 1/100 s, Linux's USER_HZ).
fn cpu_used() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split(' ').collect();
    let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).map(|t| t / 100.0);
    // utime, stime, cutime, cstime are fields 14 to 17 of the line, 11 to 14 here (0-based).
    Some((tick(11)? + tick(12)?, tick(13)? + tick(14)?))
}

/// The document's CPU budget is shared by this process and every tool it runs: before each tool,
/// the limit this process hands down (and keeps for itself) becomes what the finished tools left.
/// A page's tool cannot restart the count as a new process would.
fn hand_down_cpu_budget() -> Result<(), PdfError> {
    let budget = std::env::var("COURRIER_SANDBOX_CPU").ok().and_then(|v| v.parse().ok());
    let budget = budget.unwrap_or(SandboxLimits::default().cpu_seconds) as f64;
    let Some((own, children)) = cpu_used() else { return Ok(()) };
    let left = budget - children;
    if left <= own {
        return Err(PdfError::LimitExceeded(format!("the document used its {budget} s of CPU time")));
    }
    let soft = left.ceil() as u64;
    rlimit::Resource::CPU
        .set(soft, soft + 1)
        .map_err(|e| PdfError::Unavailable(format!("cannot lower the CPU limit: {e}")))
}

fn run_tool(program: &str, args: &[&std::ffi::OsStr]) -> Result<Vec<u8>, PdfError> {
    hand_down_cpu_budget()?;
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| PdfError::Unavailable(format!("cannot run {program} (poppler-utils): {e}")))?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    if stderr.contains("Incorrect password") {
        return Err(PdfError::Encrypted);
    }
    use std::os::unix::process::ExitStatusExt;
    if out.status.signal().is_some() {
        return Err(PdfError::LimitExceeded(format!("{program} {}", describe_death(out.status))));
    }
    Err(PdfError::Unreadable(format!("{program}: {}", stderr.lines().next().unwrap_or("failed"))))
}

/// The pixels the images a page may draw declare (`/Width` x `/Height`), those of Form XObjects
/// included, each image counted once per page whatever the times it is drawn; read from the
/// dictionaries, nothing decoded.
fn declared_pixels(doc: &lopdf::Document, page: lopdf::ObjectId) -> u64 {
    use lopdf::Object;
    fn dims(doc: &lopdf::Document, d: &lopdf::Dictionary, key: &[u8]) -> u64 {
        let value = d.get(key).and_then(|o| doc.dereference(o)).map(|(_, o)| o);
        match value {
            Ok(Object::Integer(i)) => u64::try_from(*i).unwrap_or(0),
            Ok(Object::Real(r)) if *r > 0.0 => *r as u64,
            _ => 0,
        }
    }
    fn walk(
        doc: &lopdf::Document,
        resources: &lopdf::Dictionary,
        seen: &mut std::collections::HashSet<lopdf::ObjectId>,
        depth: u32,
    ) -> u64 {
        let Ok(xobjects) = resources.get(b"XObject").and_then(|o| doc.dereference(o)).and_then(|(_, o)| o.as_dict())
        else {
            return 0;
        };
        let mut total: u64 = 0;
        for (_, entry) in xobjects.iter() {
            let Ok((id, Object::Stream(stream))) = doc.dereference(entry) else { continue };
            if let Some(id) = id
                && !seen.insert(id)
            {
                continue;
            }
            let subtype = stream.dict.get(b"Subtype").and_then(Object::as_name).unwrap_or_default();
            if subtype == b"Image" {
                total = total.saturating_add(dims(doc, &stream.dict, b"Width").saturating_mul(dims(
                    doc,
                    &stream.dict,
                    b"Height",
                )));
            } else if subtype == b"Form" && depth < 16 {
                let inner =
                    stream.dict.get(b"Resources").and_then(|o| doc.dereference(o)).and_then(|(_, o)| o.as_dict());
                if let Ok(inner) = inner {
                    total = total.saturating_add(walk(doc, inner, seen, depth + 1));
                }
            }
        }
        total
    }
    let Ok((direct, inherited)) = doc.get_page_resources(page) else { return 0 };
    let mut seen = std::collections::HashSet::new();
    let mut total = direct.map_or(0, |d| walk(doc, d, &mut seen, 0));
    for id in inherited {
        if let Ok(d) = doc.get_dictionary(id) {
            total = total.saturating_add(walk(doc, d, &mut seen, 0));
        }
    }
    total
}

/// Refuses pages whose images declare more pixels than a page's or the document's budget, before
/// any of them is decoded (poppler spent 13 s on one image declared 100,000 x 100,000).
fn check_declared_pixels(
    doc: &lopdf::Document,
    pages: impl IntoIterator<Item = lopdf::ObjectId>,
) -> Result<(), PdfError> {
    let mut total: u64 = 0;
    for page in pages {
        let pixels = declared_pixels(doc, page);
        if pixels > MAX_PAGE_DECLARED_PIXELS {
            return Err(PdfError::LimitExceeded(format!(
                "a page's images declare {} million pixels, over the {} million a page may have",
                pixels / 1_000_000,
                MAX_PAGE_DECLARED_PIXELS / 1_000_000
            )));
        }
        total = total.saturating_add(pixels);
        if total > MAX_DOCUMENT_DECLARED_PIXELS {
            return Err(PdfError::LimitExceeded(format!(
                "its images declare over {} million pixels",
                MAX_DOCUMENT_DECLARED_PIXELS / 1_000_000
            )));
        }
    }
    Ok(())
}

/// The page's only drawing is one DCTDecode image, and it shows no text: a scan to take as is.
fn single_jpeg(doc: &lopdf::Document, page: lopdf::ObjectId) -> Option<Vec<u8>> {
    let images = doc.get_page_images(page).ok()?;
    let [image] = images.as_slice() else { return None };
    let filters = image.filters.as_deref()?;
    if filters != ["DCTDecode"] || image.bits_per_component != Some(8) {
        return None;
    }
    // Decoding the content also inflates it: a bomb meets the address-space limit here.
    let content = doc.get_and_decode_page_content(page).ok()?;
    let ops: Vec<&str> = content.operations.iter().map(|o| o.operator.as_str()).collect();
    let draws = ops.iter().filter(|o| **o == "Do").count();
    let text = ops.iter().any(|o| matches!(*o, "Tj" | "TJ" | "'" | "\"" | "BI"));
    (draws == 1 && !text).then(|| image.content.to_vec())
}

/// The page's size in points, from its (possibly inherited) MediaBox.
fn page_size_points(doc: &lopdf::Document, page: lopdf::ObjectId) -> (f64, f64) {
    let mut node = doc.get_dictionary(page).ok();
    for _ in 0..32 {
        let Some(dict) = node else { break };
        if let Ok(lopdf::Object::Array(b)) = dict.get(b"MediaBox").and_then(|o| doc.dereference(o)).map(|(_, o)| o) {
            let n: Vec<f64> = b
                .iter()
                .filter_map(|o| o.as_float().ok().map(f64::from).or_else(|| o.as_i64().ok().map(|i| i as f64)))
                .collect();
            if let [x0, y0, x1, y1] = n[..] {
                return ((x1 - x0).abs().max(1.0), (y1 - y0).abs().max(1.0));
            }
        }
        node = dict.get(b"Parent").and_then(lopdf::Object::as_reference).and_then(|id| doc.get_dictionary(id)).ok();
    }
    (595.0, 842.0)
}

/// How a page is rendered: gray pixels for OCR, or a JPEG for display (pdftoppm encodes it in the
/// same pass: measured 2.6x slower when the parent encoded the pixels it received instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RenderAs {
    Pixels,
    Jpeg,
}

fn render(
    scratch: &Scratch,
    doc: &lopdf::Document,
    page_no: u32,
    page: lopdf::ObjectId,
    render_as: RenderAs,
) -> Result<PdfPage, PdfError> {
    let (w, h) = page_size_points(doc, page);
    let pixels_at = |dpi: f64| (w / 72.0 * dpi) * (h / 72.0 * dpi);
    let mut dpi = RENDER_DPI;
    if pixels_at(dpi) > MAX_RENDER_PIXELS {
        dpi = (dpi * (MAX_RENDER_PIXELS / pixels_at(dpi)).sqrt()).floor().max(1.0);
    }
    let n = page_no.to_string();
    let dpi_s = format!("{dpi}");
    let pdf = scratch.pdf();
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "-r".as_ref(),
        dpi_s.as_ref(),
        "-gray".as_ref(),
        "-f".as_ref(),
        n.as_ref(),
        "-l".as_ref(),
        n.as_ref(),
        "-singlefile".as_ref(),
    ];
    if render_as == RenderAs::Jpeg {
        args.extend::<[&std::ffi::OsStr; 3]>(["-jpeg".as_ref(), "-jpegopt".as_ref(), "quality=85".as_ref()]);
    }
    args.push(pdf.as_os_str());
    let out = run_tool("pdftoppm", &args)?;
    match render_as {
        RenderAs::Jpeg if out.starts_with(&[0xFF, 0xD8]) => Ok(PdfPage::Jpeg(out)),
        RenderAs::Jpeg => Err(PdfError::Unreadable("pdftoppm gave no JPEG".into())),
        RenderAs::Pixels => {
            parse_pgm(&out).map(PdfPage::Rendered).ok_or_else(|| PdfError::Unreadable("pdftoppm gave no image".into()))
        }
    }
}

/// A binary PGM (P5, maxval 255) as pdftoppm writes it.
fn parse_pgm(data: &[u8]) -> Option<GrayImage> {
    let mut fields = Vec::new();
    let mut i = 0;
    while fields.len() < 4 {
        while data.get(i)?.is_ascii_whitespace() {
            i += 1;
        }
        let start = i;
        while !data.get(i)?.is_ascii_whitespace() {
            i += 1;
        }
        fields.push(std::str::from_utf8(&data[start..i]).ok()?);
    }
    let (w, h): (u32, u32) = (fields[1].parse().ok()?, fields[2].parse().ok()?);
    if fields[0] != "P5" || fields[3] != "255" {
        return None;
    }
    let pixels = data.get(i + 1..)?;
    GrayImage::new(w, h, pixels.get(..(w as usize) * (h as usize))?.to_vec())
}

/// Text with at least this many letters or digits counts as a text layer; less is a scan (with
/// perhaps a stray page number).
const TEXT_LAYER_MIN_ALNUM: usize = 3;

fn content(pdf: &[u8], max_pages: u32) -> Result<Vec<Record>, PdfError> {
    content_of(&load(pdf)?, pdf, max_pages)
}

/// The page's scan when the page is nothing else: one JPEG drawn ([`single_jpeg`]), no other
/// XObject (a form could hold text), no font. Such a page has no text layer to look for.
fn bare_scan(doc: &lopdf::Document, page: lopdf::ObjectId) -> Option<Vec<u8>> {
    if !doc.get_page_fonts(page).ok()?.is_empty() {
        return None;
    }
    let (direct, referenced) = doc.get_page_resources(page).ok()?;
    let xobjects = |res: &lopdf::Dictionary| {
        res.get(b"XObject")
            .and_then(|o| doc.dereference(o))
            .and_then(|(_, o)| o.as_dict())
            .map_or(0, lopdf::Dictionary::len)
    };
    let count = direct.map_or(0, xobjects)
        + referenced.iter().filter_map(|id| doc.get_dictionary(*id).ok()).map(xobjects).sum::<usize>();
    if count != 1 {
        return None;
    }
    single_jpeg(doc, page)
}

fn content_of(doc: &lopdf::Document, pdf: &[u8], max_pages: u32) -> Result<Vec<Record>, PdfError> {
    let pages = doc.get_pages();
    let count = u32::try_from(pages.len()).unwrap_or(u32::MAX);
    if count == 0 {
        return Err(PdfError::Unreadable("the PDF has no pages".into()));
    }
    if count > max_pages {
        return Err(PdfError::TooManyPages { pages: count, max: max_pages });
    }
    check_declared_pixels(doc, pages.values().copied())?;
    let mut records = vec![Record::Count(count)];
    // A scanner's PDF (every page one bare JPEG) has no text layer: its pages go back as they are,
    // without a scratch copy or pdftotext (a process, ~10 ms, on every scanned upload).
    let scans: Option<Vec<Vec<u8>>> = pages.values().map(|&page| bare_scan(doc, page)).collect();
    if let Some(scans) = scans {
        records.extend(scans.into_iter().map(|jpeg| Record::Page(PdfPage::Jpeg(jpeg))));
        return Ok(records);
    }
    let scratch = Scratch::new(pdf)?;
    let path = scratch.pdf();
    let text = run_tool(
        "pdftotext",
        &["-layout".as_ref(), "-enc".as_ref(), "UTF-8".as_ref(), "-q".as_ref(), path.as_os_str(), "-".as_ref()],
    )?;
    let text = String::from_utf8_lossy(&text);
    let texts: Vec<&str> = text.split('\x0c').collect();
    for (i, (&page_no, &page)) in pages.iter().enumerate() {
        let t = texts.get(i).copied().unwrap_or("");
        let record = if t.chars().filter(|c| c.is_alphanumeric()).count() >= TEXT_LAYER_MIN_ALNUM {
            PdfPage::Text(t.trim_end().to_owned())
        } else if let Some(jpeg) = single_jpeg(doc, page) {
            PdfPage::Jpeg(jpeg)
        } else {
            render(&scratch, doc, page_no, page, RenderAs::Pixels)?
        };
        records.push(Record::Page(record));
    }
    Ok(records)
}

fn page_image(pdf: &[u8], page_no: u32) -> Result<Vec<Record>, PdfError> {
    let doc = load(pdf)?;
    let pages = doc.get_pages();
    let count = u32::try_from(pages.len()).unwrap_or(u32::MAX);
    let &page = pages.get(&page_no).ok_or(PdfError::NoSuchPage(page_no))?;
    check_declared_pixels(&doc, [page])?;
    let image = match single_jpeg(&doc, page) {
        Some(jpeg) => PdfPage::Jpeg(jpeg),
        None => render(&Scratch::new(pdf)?, &doc, page_no, page, RenderAs::Jpeg)?,
    };
    Ok(vec![Record::Count(count), Record::Page(image)])
}

/// The embedded invoice XML, wherever the producer put it and however it named it
/// ([`super::pdf_attachments`]).
fn invoice_xml(pdf: &[u8]) -> Result<Vec<Record>, PdfError> {
    let doc = load(pdf)?;
    Ok(super::pdf_attachments::invoice_xml(&doc)?.map(Record::Xml).into_iter().collect())
}

/// The sandbox executable of a server: the lean `courrier-sandbox` beside it when it was built (it
/// starts in a few ms instead of ~18: it does not load libtesseract), else the server's own binary.
pub fn default_exe() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok().filter(|p| Path::new(p).is_file())?;
    let lean = exe.with_file_name("courrier-sandbox");
    Some(if lean.is_file() { lean } else { exe })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-page PDF drawing `jpeg` full page, and with `text` also a line of it in Helvetica
    /// (a scan with a text layer, as OCR software writes them).
    fn scan_pdf(jpeg: &[u8], text: Option<&str>) -> Vec<u8> {
        let content = match text {
            Some(t) => format!("q 595 0 0 842 0 0 cm /Im0 Do Q BT /F1 12 Tf 72 720 Td ({t}) Tj ET"),
            None => "q 595 0 0 842 0 0 cm /Im0 Do Q".to_owned(),
        };
        let font = if text.is_some() { "/Font<</F1 6 0 R>>" } else { "" };
        let mut objects: Vec<Vec<u8>> = vec![
            b"<</Type/Catalog/Pages 2 0 R>>".to_vec(),
            b"<</Type/Pages/Kids[5 0 R]/Count 1>>".to_vec(),
            format!("<</Length {}>>stream\n{content}\nendstream", content.len()).into_bytes(),
        ];
        let mut image =
            b"<</Type/XObject/Subtype/Image/Width 16/Height 16/ColorSpace/DeviceGray/BitsPerComponent 8/Filter/DCTDecode"
                .to_vec();
        image.extend_from_slice(format!("/Length {}>>stream\n", jpeg.len()).as_bytes());
        image.extend_from_slice(jpeg);
        image.extend_from_slice(b"\nendstream");
        objects.push(image);
        objects.push(
            format!("<</Type/Page/Parent 2 0 R/MediaBox[0 0 595 842]/Resources<</XObject<</Im0 4 0 R>>{font}>>/Contents 3 0 R>>")
                .into_bytes(),
        );
        objects.push(b"<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>".to_vec());
        let mut out = b"%PDF-1.4\n".to_vec();
        let mut offsets = Vec::new();
        for (i, o) in objects.iter().enumerate() {
            offsets.push(out.len());
            out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
            out.extend_from_slice(o);
            out.extend_from_slice(b"\nendobj\n");
        }
        let xref = out.len();
        out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
        for o in offsets {
            out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
        }
        out.extend_from_slice(
            format!("trailer\n<</Size {}/Root 1 0 R>>\nstartxref\n{xref}\n%%EOF\n", objects.len() + 1).as_bytes(),
        );
        out
    }

    /// A scanner's page goes back as its JPEG (no text layer looked for); a scan that carries a text
    /// layer still gives its text.
    #[test]
    fn a_bare_scan_is_its_jpeg_and_a_scan_with_a_text_layer_its_text() {
        use crate::ocr::images::ImageCodec;
        let page = GrayImage::new(16, 16, vec![200; 256]).unwrap();
        let jpeg = crate::adapters::image_codec::ImageCrateCodec.encode_jpeg(&page).unwrap();
        let bare = content(&scan_pdf(&jpeg, None), 5).unwrap();
        assert!(matches!(&bare[..], [Record::Count(1), Record::Page(PdfPage::Jpeg(j))] if *j == jpeg), "{bare:?}");
        let layered = content(&scan_pdf(&jpeg, Some("Facture 2026-042 Total TTC")), 5).unwrap();
        assert!(
            matches!(&layered[..], [Record::Count(1), Record::Page(PdfPage::Text(t))] if t.contains("Facture 2026-042")),
            "{layered:?}"
        );
    }

    #[test]
    fn records_round_trip() {
        let records = vec![
            Record::Count(2),
            Record::Page(PdfPage::Text("Total TTC\n".into())),
            Record::Page(PdfPage::Jpeg(vec![0xFF, 0xD8, 1, 2])),
            Record::Xml(b"<rsm:CrossIndustryInvoice/>".to_vec()),
            Record::Page(PdfPage::Rendered(GrayImage::new(2, 1, vec![0, 255]).unwrap())),
            Record::Error(PdfError::TooManyPages { pages: 60, max: 50 }),
            Record::Error(PdfError::Encrypted),
        ];
        let mut buf = Vec::new();
        for r in &records {
            write_record(&mut buf, r).unwrap();
        }
        assert_eq!(parse_records(&buf).unwrap(), records);
        assert!(parse_records(&buf[..buf.len() - 1]).is_err());
        assert!(parse_records(b"Z\0\0\0\0\0\0\0\0").is_err());
    }

    /// A stand-in for `courrier` that misbehaves as a hostile PDF could make the reader misbehave.
    fn fake_reader(dir: &Path, name: &str, script: &str, limits: SandboxLimits) -> SandboxedPdfReader {
        use std::os::unix::fs::PermissionsExt;
        let exe = dir.join(name);
        std::fs::write(&exe, format!("#!/bin/sh\ncat >/dev/null\n{script}\n")).unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        SandboxedPdfReader::new(exe, limits)
    }

    #[test]
    fn a_child_that_dies_hangs_or_floods_is_a_limit_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let limits = SandboxLimits {
            wall_time: Duration::from_millis(500),
            max_output_bytes: 1024 * 1024,
            ..SandboxLimits::default()
        };
        let pdf = b"%PDF-1.4 whatever";
        let crash = fake_reader(dir.path(), "crash", "kill -SEGV $$", limits);
        assert!(matches!(crash.content(pdf, 50), Err(PdfError::LimitExceeded(m)) if m.contains("stack")));
        let started = Instant::now();
        let hang = fake_reader(dir.path(), "hang", "exec sleep 30", limits);
        assert!(matches!(hang.content(pdf, 50), Err(PdfError::LimitExceeded(m)) if m.contains("longer")));
        assert!(started.elapsed() < Duration::from_secs(5), "killed at its wall time");
        let flood = fake_reader(dir.path(), "flood", "exec head -c 3000000 /dev/zero", limits);
        assert!(matches!(flood.content(pdf, 50), Err(PdfError::LimitExceeded(m)) if m.contains("output")));
        let garbage = fake_reader(dir.path(), "garbage", "printf 'hello'", limits);
        assert!(matches!(garbage.content(pdf, 50), Err(PdfError::Unreadable(_))));
        let missing = SandboxedPdfReader::new(dir.path().join("absent"), limits);
        assert!(matches!(missing.content(pdf, 50), Err(PdfError::Unavailable(_))));
    }

    #[test]
    fn concurrent_documents_never_run_more_helpers_than_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let limits = SandboxLimits { max_helpers: 2, wall_time: Duration::from_secs(30), ..SandboxLimits::default() };
        let slow = fake_reader(dir.path(), "slow", "sleep 0.3; printf 'N\\0\\0\\0\\0\\0\\0\\0\\4\\0\\0\\0\\1'", limits);
        std::thread::scope(|s| {
            for _ in 0..6 {
                s.spawn(|| slow.content(b"%PDF-1.4", 50).unwrap());
            }
        });
        assert_eq!(slow.peak_helpers(), 2);
    }

    #[test]
    fn a_request_waits_for_a_helper_slot_until_its_deadline_only() {
        let slots = HelperSlots::default();
        let held = slots.acquire(1, Instant::now() + Duration::from_secs(1)).unwrap();
        assert!(slots.acquire(1, Instant::now() + Duration::from_millis(100)).is_none(), "over the cap");
        std::thread::scope(|s| {
            let waiter = s.spawn(|| slots.acquire(1, Instant::now() + Duration::from_secs(30)).is_some());
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
            assert!(waiter.join().unwrap(), "the freed slot goes to the one waiting");
        });
        assert_eq!(slots.state.lock().unwrap().running, 0);
    }

    #[test]
    fn a_helper_killed_at_its_deadline_leaves_no_scratch_folder() {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("scratch-was");
        let limits = SandboxLimits { wall_time: Duration::from_millis(500), ..SandboxLimits::default() };
        let script = format!("echo \"$COURRIER_SANDBOX_SCRATCH\" > {}; exec sleep 30", record.display());
        let hang = fake_reader(dir.path(), "hang", &script, limits);
        assert!(matches!(hang.content(b"%PDF-1.4", 50), Err(PdfError::LimitExceeded(_))));
        let scratch = std::fs::read_to_string(&record).unwrap();
        let scratch = Path::new(scratch.trim());
        assert!(scratch.file_name().unwrap().to_str().unwrap().starts_with(SCRATCH_PREFIX), "{scratch:?}");
        assert!(!scratch.exists(), "{scratch:?} outlived its killed helper");
    }

    #[test]
    fn the_start_sweep_removes_folders_of_dead_servers_only() {
        let tmp = tempfile::tempdir().unwrap();
        // A process that has ended: its pid names no process (until reused).
        let mut gone = Command::new("true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let make = |name: String| {
            let d = tmp.path().join(name);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("in.pdf"), b"%PDF").unwrap();
            d
        };
        let stale = make(format!("{SCRATCH_PREFIX}{dead}-0123abcd"));
        let mine = make(format!("{SCRATCH_PREFIX}{}-0123abcd", std::process::id()));
        let live = make(format!("{SCRATCH_PREFIX}1-0123abcd"));
        let recent_legacy = make(format!("{SCRATCH_PREFIX}0123456789abcdef"));
        let unrelated = make("courrier-other-1".into());
        assert_eq!(sweep_stale_scratch_in(tmp.path()), 1);
        assert!(!stale.exists());
        for kept in [mine, live, recent_legacy, unrelated] {
            assert!(kept.exists(), "{kept:?}");
        }
    }

    #[test]
    fn reads_pdftoppm_gray_output() {
        let img = parse_pgm(b"P5\n2 2\n255\n\x00\x01\x02\x03").unwrap();
        assert_eq!((img.width(), img.height(), img.pixels()), (2, 2, &[0u8, 1, 2, 3][..]));
        assert!(parse_pgm(b"P6\n2 2\n255\n\x00").is_none());
        assert!(parse_pgm(b"P5\n2 2\n255\n\x00").is_none());
    }
}
