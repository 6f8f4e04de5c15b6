//! `bench-ocr`: the OCR service against the tools it is measured by, in one run on one machine.
//!
//! - one A4 page scanned at 300 dpi through `POST /api/ocrs` (as a JPEG, and as a one-page scanned
//!   PDF) against the command a user would run on the same image, `tesseract IMG - -l L` in the
//!   page's language, one thread each (`OMP_THREAD_LIMIT=1`; the server's engines are
//!   single-threaded), a French and a German page; with where the server's time went, read from
//!   its `Server-Timing` header (decode, render, deskew, engine, extract, store);
//! - the former baseline as an extra line: the 150 dpi PNG against `tesseract -l eng+fra --psm 1`;
//! - a text-layer PDF against the scan of the same page (the OCR path): what the text layer saves;
//! - a page to JPEG (`action=storeOnly` of a text PDF: render + encode) against `pdftoppm -jpeg`;
//! - pages per minute with 4 concurrent clients;
//! - `--scenario bomb`: the time to refuse a PDF bomb (under 1 KB, each page drawing one image
//!   declared 100,000 x 100,000 pixels; one page and five) against the time to process an honest
//!   one-page scanned PDF, both through `POST /api/ocrs`.
//!
//! Each measurement is the median of `--rounds` runs, the two sides alternating. Results go to
//! BENCHMARKS.md; `--smoke` runs everything once (CI runs it so this cannot rot).

use courrier_benches::pdf::bomb;
use courrier_benches::{Server, create_api_key, create_bench_user, free_port, median, serve_command, sibling};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: bench-ocr [--scenario all|pages|bomb] [--courrier PATH] [--before PATH] [--rounds N] [--clients N] [--seconds N] [--smoke]";

struct Options {
    courrier: PathBuf,
    /// `--before PATH`: another build measured in the same rounds of the pages scenario.
    before: Option<PathBuf>,
    rounds: usize,
    clients: usize,
    seconds: u64,
    /// `--scenario bomb`: only the bomb against the honest page.
    bomb_only: bool,
    /// `--scenario pages`: only the scanned pages against the tesseract CLI.
    pages_only: bool,
}

fn main() -> ExitCode {
    let mut opts = Options {
        courrier: default_courrier(),
        before: None,
        rounds: 7,
        clients: 4,
        seconds: 60,
        bomb_only: false,
        pages_only: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        let parsed: Result<(), String> = match a.as_str() {
            "--courrier" => value("--courrier").map(|v| opts.courrier = PathBuf::from(v)),
            "--before" => value("--before").map(|v| opts.before = Some(PathBuf::from(v))),
            "--rounds" => {
                value("--rounds").and_then(|v| v.parse().map_err(|e| format!("--rounds: {e}"))).map(|v| opts.rounds = v)
            }
            "--clients" => value("--clients")
                .and_then(|v| v.parse().map_err(|e| format!("--clients: {e}")))
                .map(|v| opts.clients = v),
            "--seconds" => value("--seconds")
                .and_then(|v| v.parse().map_err(|e| format!("--seconds: {e}")))
                .map(|v| opts.seconds = v),
            "--scenario" => value("--scenario").and_then(|v| {
                (opts.bomb_only, opts.pages_only) = match v.as_str() {
                    "all" => (false, false),
                    "bomb" => (true, false),
                    "pages" => (false, true),
                    _ => return Err(format!("--scenario must be all, pages or bomb, got {v:?}")),
                };
                Ok(())
            }),
            "--smoke" => {
                (opts.rounds, opts.seconds) = (1, 3);
                Ok(())
            }
            "--help" | "-h" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => Err(format!("unknown argument {other:?}")),
        };
        if let Err(e) = parsed {
            eprintln!("bench-ocr: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-ocr: error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `target/<profile>/courrier` next to this executable.
fn default_courrier() -> PathBuf {
    sibling("courrier").unwrap_or_else(|_| "courrier".into())
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/ocr")
}

fn read_fixture(name: &str) -> Result<Vec<u8>, String> {
    std::fs::read(fixtures().join(name)).map_err(|e| format!("fixture {name}: {e}"))
}

/// `courrier serve` on a fresh data directory, with the bench user and a key that reads.
struct Courrier {
    /// Killed when dropped, before its data directory is removed.
    _server: Server,
    addr: SocketAddr,
    key: String,
    _dir: tempfile::TempDir,
}

fn start(courrier: &Path) -> Result<Courrier, String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    create_bench_user(courrier, dir.path(), false)?;
    let key = create_api_key(courrier, dir.path(), "bench", "read", 100_000)?;
    let port = free_port()?;
    let log = dir.path().join("server.log");
    let mut server = Server::start("courrier", serve_command(courrier, dir.path(), port), port, log)?;
    server.wait_healthy()?;
    Ok(Courrier { _server: server, addr: SocketAddr::from(([127, 0, 0, 1], port)), key, _dir: dir })
}

/// One upload on a new connection; the status and the body.
fn upload(server: &Courrier, file: &[u8], action: &str) -> Result<(u16, Vec<u8>), String> {
    upload_in(server, file, action, "fr").map(|(status, _, body)| (status, body))
}

/// One upload in `lang` on a new connection; the status, the response head and the body.
fn upload_in(server: &Courrier, file: &[u8], action: &str, lang: &str) -> Result<(u16, String, Vec<u8>), String> {
    let boundary = "bench-ocr-boundary-5f2a";
    let mut body = Vec::new();
    for (name, value) in [("lang", lang), ("profile", "invoice"), ("action", action)] {
        body.extend_from_slice(
            format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    }
    body.extend_from_slice(
        format!("--{boundary}\r\nContent-Disposition: form-data; name=\"pdf\"; filename=\"f\"\r\n\r\n").as_bytes(),
    );
    body.extend_from_slice(file);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let head = format!(
        "POST /api/ocrs HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\nContent-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        server.addr,
        server.key,
        body.len()
    );
    let mut s = TcpStream::connect(server.addr).map_err(|e| e.to_string())?;
    s.write_all(head.as_bytes()).and_then(|()| s.write_all(&body)).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    s.read_to_end(&mut out).map_err(|e| e.to_string())?;
    let status = std::str::from_utf8(out.get(9..12).unwrap_or(b"000")).ok().and_then(|c| c.parse().ok()).unwrap_or(0);
    let split = out.windows(4).position(|w| w == b"\r\n\r\n").map_or(out.len(), |p| p + 4);
    Ok((status, String::from_utf8_lossy(&out[..split]).into_owned(), out[split..].to_vec()))
}

/// The stages of the server's `Server-Timing` header, in its order, and the client's wall time
/// around the request.
const STAGES: [&str; 7] = ["decode", "render", "deskew", "engine", "extract", "store", "total"];

/// `name;dur=ms` entries of the response head's `Server-Timing`, in [`STAGES`] order (0 when absent:
/// a build without the header).
fn server_timing(head: &str) -> [f64; 7] {
    let mut out = [0.0; 7];
    let Some(line) = head.lines().find(|l| l.to_ascii_lowercase().starts_with("server-timing:")) else { return out };
    for entry in line["server-timing:".len()..].split(',') {
        let mut parts = entry.trim().split(';');
        let name = parts.next().unwrap_or("");
        let dur = parts.find_map(|p| p.trim().strip_prefix("dur=")).and_then(|d| d.parse().ok()).unwrap_or(0.0);
        if let Some(i) = STAGES.iter().position(|s| *s == name) {
            out[i] = dur;
        }
    }
    out
}

/// One A4 page scanned at 300 dpi, in one language, with what its text must contain.
struct ScanPage {
    /// `fr`, `de`: the upload's `lang`.
    lang: &'static str,
    /// Tesseract's name of the language: what a user passes to `-l`.
    tesseract: &'static str,
    path: PathBuf,
    jpeg: Vec<u8>,
    /// The same JPEG as the one image of a one-page A4 PDF (a scanner's output).
    pdf: Vec<u8>,
    expect: String,
}

fn scan_page(name: &str, lang: &'static str, tesseract: &'static str) -> Result<ScanPage, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/invoices/generated");
    let path = dir.join(format!("{name}.jpg"));
    let jpeg = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let truth: serde_json::Value = std::fs::read(dir.join(format!("{name}.json")))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))?;
    let expect = truth["meta"]["invoice_number"].as_str().ok_or(format!("{name}.json: no invoice_number"))?.to_owned();
    let (w, h) = courrier_core::ocr::wrap::jpeg_dimensions(&jpeg).ok_or(format!("{name}: not a JPEG"))?;
    let image = format!(
        "/Type/XObject/Subtype/Image/Width {w}/Height {h}/ColorSpace/DeviceGray/BitsPerComponent 8/Filter/DCTDecode"
    );
    let pdf = courrier_benches::pdf::pdf(1, b"q 595 0 0 842 0 0 cm /Im0 Do Q", Some((&image, &jpeg)));
    Ok(ScanPage { lang, tesseract, path, jpeg, pdf, expect })
}

/// The client's milliseconds and the server's stages ([`STAGES`]).
type Timed = (f64, [f64; 7]);

/// An upload timed by the client, with the server's own breakdown.
fn timed_upload(server: &Courrier, file: &[u8], lang: &str, expect: &str) -> Result<Timed, String> {
    let started = Instant::now();
    let (status, head, body) = upload_in(server, file, "default", lang)?;
    let ms = started.elapsed().as_secs_f64() * 1000.0;
    let text = String::from_utf8_lossy(&body);
    if status != 200 || !text.contains(expect) {
        return Err(format!("POST /api/ocrs answered {status} without {expect:?}: {}", &text[..text.len().min(300)]));
    }
    Ok((ms, server_timing(&head)))
}

/// Each scanned page as a JPEG upload, as a scanned PDF upload (on each build measured: this one,
/// and `--before`'s), and through the `tesseract` CLI, alternating round by round after one warm-up
/// each; a table of medians, ratios and breakdowns.
fn pages_vs_cli(opts: &Options, server: &Courrier) -> Result<(), String> {
    let pages = [scan_page("fr-1-scan300", "fr", "fra")?, scan_page("de-1-scan300", "de", "deu")?];
    let before = opts.before.as_deref().map(start).transpose()?;
    let mut builds = vec![("now", server)];
    if let Some(b) = &before {
        builds.push(("before", b));
    }
    println!(
        "one page vs `tesseract IMG - -l L` (OMP_THREAD_LIMIT=1), A4 scanned at 300 dpi, {} rounds; builds: now {}{}; load average {}",
        opts.rounds,
        opts.courrier.display(),
        opts.before.as_ref().map(|b| format!(", before {}", b.display())).unwrap_or_default(),
        courrier_benches::loadavg()
    );
    let mut ratios = Vec::new();
    let mut breakdowns = Vec::new();
    for page in &pages {
        let path = page.path.display().to_string();
        let cli = || timed(|| tool("tesseract", &[&path, "-", "-l", page.tesseract], &page.expect));
        for (_, build) in &builds {
            timed_upload(build, &page.jpeg, page.lang, &page.expect)?;
            timed_upload(build, &page.pdf, page.lang, &page.expect)?;
        }
        cli()?;
        // Per build: JPEG runs, PDF runs.
        let mut runs: Vec<[Vec<Timed>; 2]> = builds.iter().map(|_| Default::default()).collect();
        let mut tess = Vec::new();
        for _ in 0..opts.rounds {
            for (i, (_, build)) in builds.iter().enumerate() {
                runs[i][0].push(timed_upload(build, &page.jpeg, page.lang, &page.expect)?);
                runs[i][1].push(timed_upload(build, &page.pdf, page.lang, &page.expect)?);
            }
            tess.push(cli()?);
        }
        let tess_ms = median(tess);
        for ((name, _), [jpeg, pdf]) in builds.iter().zip(runs) {
            for (kind, runs) in [("JPEG", jpeg), ("PDF", pdf)] {
                let client = median(runs.iter().map(|r| r.0).collect());
                let mut stages = [0.0; 7];
                for (i, stage) in stages.iter_mut().enumerate() {
                    *stage = median(runs.iter().map(|r| r.1[i]).collect());
                }
                ratios.push((*name, page.tesseract, kind, client, tess_ms));
                breakdowns.push((*name, page.tesseract, kind, client, stages));
            }
        }
    }
    println!("| build | page | upload | courrier | `tesseract IMG - -l L` | ratio |");
    println!("|---|---|---|---:|---:|---:|");
    for (build, lang, kind, api_ms, cli_ms) in &ratios {
        println!("| {build} | {lang} | {kind} | {api_ms:.0} ms | {cli_ms:.0} ms | **{:.2}** |", api_ms / cli_ms);
    }
    println!("where the server's time went (medians, ms; http+queue = the client's time minus the server's total):");
    println!(
        "| build | page | upload | decode | render | deskew | engine | extract | store | server total | http+queue | client |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (build, lang, kind, client, s) in &breakdowns {
        println!(
            "| {build} | {lang} | {kind} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.0} | {:.0} | {client:.0} |",
            s[0],
            s[1],
            s[2],
            s[3],
            s[4],
            s[5],
            s[6],
            client - s[6]
        );
    }
    println!("load average at the end: {}", courrier_benches::loadavg());
    let worst = ratios.iter().filter(|r| r.0 == "now").map(|r| r.3 / r.4).fold(0.0, f64::max);
    println!("worst ratio of this build {worst:.2} (target <= 0.95)");
    Ok(())
}

fn timed(f: impl FnOnce() -> Result<(), String>) -> Result<f64, String> {
    let started = Instant::now();
    f()?;
    Ok(started.elapsed().as_secs_f64() * 1000.0)
}

fn api(server: &Courrier, file: &[u8], action: &str, expect: &str) -> Result<(), String> {
    let (status, body) = upload(server, file, action)?;
    let text = String::from_utf8_lossy(&body);
    if status != 200 || !text.contains(expect) {
        return Err(format!("POST /api/ocrs answered {status}: {}", &text[..text.len().min(300)]));
    }
    Ok(())
}

fn tool(program: &str, args: &[&str], expect: &str) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .env("OMP_THREAD_LIMIT", "1")
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("{program} (scripts/setup-system --test installs it): {e}"))?;
    if !out.status.success() || !String::from_utf8_lossy(&out.stdout).contains(expect) {
        return Err(format!("{program} {args:?} failed or did not read {expect:?}"));
    }
    Ok(())
}

/// Runs `a` and `b` alternately `rounds` times after one warm-up each; their medians in ms.
fn compare(
    rounds: usize,
    mut a: impl FnMut() -> Result<f64, String>,
    mut b: impl FnMut() -> Result<f64, String>,
) -> Result<(f64, f64), String> {
    a()?;
    b()?;
    let (mut xa, mut xb) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        xa.push(a()?);
        xb.push(b()?);
    }
    Ok((median(xa), median(xb)))
}

fn run(opts: &Options) -> Result<(), String> {
    let server = start(&opts.courrier)?;
    let png = read_fixture("invoice-scan.png")?;
    let png_path = fixtures().join("invoice-scan.png").display().to_string();
    let text_pdf = read_fixture("invoice-text.pdf")?;
    let text_pdf_path = fixtures().join("invoice-text.pdf").display().to_string();
    let scan_pdf = read_fixture("invoice-scan.pdf")?;
    println!("bench-ocr: {} rounds, courrier {}", opts.rounds, opts.courrier.display());
    if opts.bomb_only {
        return bomb_vs_page(opts, &server, &scan_pdf);
    }

    pages_vs_cli(opts, &server)?;
    if opts.pages_only {
        return Ok(());
    }
    let (api_ms, cli_ms) = compare(
        opts.rounds,
        || timed(|| api(&server, &png, "default", "Total TTC")),
        || timed(|| tool("tesseract", &[&png_path, "-", "-l", "eng+fra", "--psm", "1", "--dpi", "300"], "Total TTC")),
    )?;
    println!(
        "former baseline, PNG A4 150 dpi: api {api_ms:.0} ms, `tesseract -l eng+fra --psm 1 --dpi 300` {cli_ms:.0} ms, ratio {:.2}",
        api_ms / cli_ms
    );

    let (text_ms, scan_ms) = compare(
        opts.rounds,
        || timed(|| api(&server, &text_pdf, "default", "Total TTC")),
        || timed(|| api(&server, &scan_pdf, "default", "Total TTC")),
    )?;
    println!(
        "same page, text layer vs OCR: text PDF {text_ms:.0} ms, scanned PDF {scan_ms:.0} ms, {:.1}x faster (target >= 20)",
        scan_ms / text_ms
    );

    let (jpeg_ms, ppm_ms) = compare(
        opts.rounds,
        || timed(|| api(&server, &text_pdf, "storeOnly", "jpegBase64")),
        || {
            timed(|| {
                tool("pdftoppm", &["-jpeg", "-gray", "-r", "300", "-singlefile", &text_pdf_path, "/dev/stdout"], "")
            })
        },
    )?;
    println!(
        "page -> JPEG (A4 300 dpi): api storeOnly {jpeg_ms:.0} ms, pdftoppm {ppm_ms:.0} ms, ratio {:.2}",
        jpeg_ms / ppm_ms
    );

    let jpeg = read_fixture("invoice-scan.jpg")?;
    let until = Instant::now() + Duration::from_secs(opts.seconds);
    let pages = std::thread::scope(|s| {
        let workers: Vec<_> = (0..opts.clients)
            .map(|_| {
                s.spawn(|| {
                    let mut n = 0u64;
                    while Instant::now() < until {
                        if api(&server, &jpeg, "default", "Total TTC").is_err() {
                            return Err(());
                        }
                        n += 1;
                    }
                    Ok(n)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or(Err(()))).sum::<Result<u64, ()>>()
    })
    .map_err(|()| "a concurrent upload failed".to_owned())?;
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "throughput: {pages} pages in {} s with {} clients on {cores} cores = {:.0} pages/minute",
        opts.seconds,
        opts.clients,
        pages as f64 * 60.0 / opts.seconds as f64
    );
    bomb_vs_page(opts, &server, &scan_pdf)
}

/// The upload is refused with 422 `document_too_complex`.
fn refused(server: &Courrier, file: &[u8]) -> Result<(), String> {
    let (status, body) = upload(server, file, "default")?;
    let text = String::from_utf8_lossy(&body);
    if status != 422 || !text.contains("document_too_complex") {
        return Err(format!("POST /api/ocrs of a bomb answered {status}: {}", &text[..text.len().min(300)]));
    }
    Ok(())
}

/// The bombs (one page, five pages) against the honest scanned page, alternating round by round
/// after one warm-up each; a line per round, then the medians and the ratios.
fn bomb_vs_page(opts: &Options, server: &Courrier, page: &[u8]) -> Result<(), String> {
    let (one, five) = (bomb(1), bomb(5));
    println!(
        "bomb vs page: `POST /api/ocrs` (lang=fr, profile=invoice) of fixtures/ocr/invoice-scan.pdf ({} bytes, \
         answered 200 with its text) against bombs of 1 page ({} bytes) and 5 pages ({} bytes), each answered 422 \
         document_too_complex; load average {}",
        page.len(),
        one.len(),
        five.len(),
        courrier_benches::loadavg()
    );
    // The honest page, then each bomb, in every round.
    let runs: [Box<dyn Fn() -> Result<f64, String> + '_>; 3] = [
        Box::new(|| timed(|| api(server, page, "default", "Total TTC"))),
        Box::new(|| timed(|| refused(server, &one))),
        Box::new(|| timed(|| refused(server, &five))),
    ];
    for run in &runs {
        run()?;
    }
    let mut times: [Vec<f64>; 3] = Default::default();
    println!("| round | page | bomb 1 page | bomb 5 pages | ratio bomb 1/page | ratio bomb 5/page |");
    println!("|---|---:|---:|---:|---:|---:|");
    for round in 1..=opts.rounds {
        let mut row = [0.0; 3];
        for (i, run) in runs.iter().enumerate() {
            row[i] = run()?;
            times[i].push(row[i]);
        }
        println!(
            "| {round} | {:.0} ms | {:.1} ms | {:.1} ms | {:.4} | {:.4} |",
            row[0],
            row[1],
            row[2],
            row[1] / row[0],
            row[2] / row[0]
        );
    }
    let [page_ms, one_ms, five_ms] = times.map(median);
    println!(
        "| **median** | **{page_ms:.0} ms** | **{one_ms:.1} ms** | **{five_ms:.1} ms** | **{:.4}** | **{:.4}** |",
        one_ms / page_ms,
        five_ms / page_ms
    );
    println!(
        "bomb refused in {one_ms:.1} ms (1 page) and {five_ms:.1} ms (5 pages), the honest page processed in \
         {page_ms:.0} ms: ratios {:.4} and {:.4}",
        one_ms / page_ms,
        five_ms / page_ms
    );
    Ok(())
}
