//! The OCR engine over the system libtesseract (the `tesseract` crate; `tesseract-rs` downloads
//! sources in its build script and clashes with tesseract-sys, see stack.md).
//!
//! A fixed pool of worker threads, each owning its initialised engines (one `TessBaseAPI` per
//! language, created on first use and reused: init costs 0.05-0.5 s, a 300 dpi page ~0.4 s). Requests queue for a
//! free worker, so OCR never uses more threads than the pool, whatever the number of clients.
//! Each engine must run single-threaded: OpenMP's default threading made a page take 1.7-4.9 s
//! instead of 0.6 s here. libgomp reads `OMP_THREAD_LIMIT` when it is loaded, before any Rust
//! code runs, so the binary re-executes itself with it set (cli `main.rs`); this adapter only
//! warns when it finds it missing.

use crate::ocr::engine::{EngineError, GrayImage, Language, Lines, OcrEngine, OcrWord, RecognizedPage, Segmentation};
use std::collections::HashMap;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex, OnceLock};
use tesseract::Tesseract;

/// The resolution a zone is said to have (cuts of pages rendered at 300 dpi, scans usually
/// 200-300): a zone is segmented as a line or a block, which never estimates one, and Tesseract's
/// fallback of 70 dpi shrank its size thresholds.
const ZONE_DPI: i32 = 300;
/// A whole page's resolution is left unknown (0): its automatic segmentation then estimates it
/// from the size of the text's lines, as the `tesseract` command does for an image without one.
/// A fixed 300 read the 300 dpi fixture pages a fifth slower than the estimate (403 dpi for
/// `fr-1-scan300.jpg`, whose type is large), for the same text.
const PAGE_DPI_UNKNOWN: i32 = 0;

/// A page read across (PSM 3) whose words average under this confidence (0-100) is read again
/// with orientation detection (PSM 1): an upside-down page reads as noise below 40, a good scan
/// above 85.
const LOW_CONFIDENCE: i32 = 60;

/// What a job asks for: a page's text only, or its text and the words' boxes (Tesseract's TSV),
/// or the text of a zone cut out of a page, segmented as one line or one block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Text(Lines),
    Words(Lines),
    Zone(Segmentation),
}

struct Job {
    image: GrayImage,
    lang: Language,
    want: Want,
    reply: Sender<Result<RecognizedPage, EngineError>>,
}

pub struct TesseractPool {
    jobs: Mutex<Option<Sender<Job>>>,
    workers: usize,
    ready: OnceLock<Result<(), EngineError>>,
}

impl TesseractPool {
    /// A pool of `workers` threads (at least one). Threads start with the first request.
    pub fn new(workers: usize) -> Self {
        if std::env::var_os("OMP_THREAD_LIMIT").is_none() {
            tracing::warn!(
                "OMP_THREAD_LIMIT is not set: Tesseract may run several times slower (start through `courrier`)"
            );
        }
        Self { jobs: Mutex::new(None), workers: workers.max(1), ready: OnceLock::new() }
    }

    fn sender(&self) -> Result<Sender<Job>, EngineError> {
        let mut guard = self.jobs.lock().map_err(|_| EngineError::Unavailable("the OCR pool is poisoned".into()))?;
        if let Some(s) = guard.as_ref() {
            return Ok(s.clone());
        }
        let (tx, rx) = channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..self.workers {
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .name(format!("courrier-ocr-{n}"))
                .spawn(move || worker(&rx))
                .map_err(|e| EngineError::Unavailable(format!("cannot start an OCR worker: {e}")))?;
        }
        *guard = Some(tx.clone());
        Ok(tx)
    }
}

fn init(langs: &str) -> Result<Tesseract, EngineError> {
    Tesseract::new(None, Some(langs))
        .map_err(|e| EngineError::Unavailable(format!("cannot load Tesseract for {langs}: {e}")))
}

/// The page segmentation of a job. A whole page whose lines run across is segmented
/// automatically without orientation detection (PSM 3), as the `tesseract` command does by
/// default; one that may be turned (a quarter turn, a photo) with it (PSM 1, the osd data: pages
/// turned 90, 180 and 270 degrees read right, for a third more time). The library's own default,
/// one block (PSM 6), read a turned page as noise.
fn segmentation(want: Want) -> tesseract::PageSegMode {
    match want {
        Want::Text(Lines::Across) | Want::Words(Lines::Across) => tesseract::PageSegMode::PsmAuto,
        Want::Text(Lines::Unsure) | Want::Words(Lines::Unsure) => tesseract::PageSegMode::PsmAutoOsd,
        Want::Zone(Segmentation::Line) => tesseract::PageSegMode::PsmSingleLine,
        Want::Zone(Segmentation::Block) => tesseract::PageSegMode::PsmSingleBlock,
    }
}

fn recognize_with(
    mut engine: Tesseract,
    image: &GrayImage,
    want: Want,
) -> Result<(Tesseract, RecognizedPage, i32), EngineError> {
    let failed = |e: &dyn std::fmt::Display| EngineError::Failed(e.to_string());
    // Set on every job: engines are reused, and a zone's mode must not leak into the next page.
    engine.set_page_seg_mode(segmentation(want));
    let (w, h) =
        (i32::try_from(image.width()).map_err(|e| failed(&e))?, i32::try_from(image.height()).map_err(|e| failed(&e))?);
    // The pixels go to Tesseract as they are (no file, no PNG or TIFF on the way). Set on every
    // job, like the mode: a zone's resolution must not carry over to the next page.
    let dpi = if matches!(want, Want::Zone(_)) { ZONE_DPI } else { PAGE_DPI_UNKNOWN };
    let mut engine = engine
        .set_frame(image.pixels(), w, h, 1, w)
        .map_err(|e| failed(&e))?
        .set_source_resolution(dpi)
        .recognize()
        .map_err(|e| failed(&e))?;
    let text = engine.get_text().map_err(|e| failed(&e))?;
    let words = match want {
        Want::Text(_) | Want::Zone(_) => Vec::new(),
        // The same recognition's results: get_tsv_text does not recognise again.
        Want::Words(_) => parse_tsv(&engine.get_tsv_text(0).map_err(|e| failed(&e))?),
    };
    let confidence = engine.mean_text_conf();
    Ok((engine, RecognizedPage { text, words }, confidence))
}

/// A job on the engine: a page read across that comes out as noise (upside down, which a glance
/// cannot tell from upright) is read once more with orientation detection, and the better read kept.
fn run_job(engine: Tesseract, image: &GrayImage, want: Want) -> Result<(Tesseract, RecognizedPage), EngineError> {
    let (engine, page, confidence) = recognize_with(engine, image, want)?;
    let again = match want {
        Want::Text(Lines::Across) if confidence < LOW_CONFIDENCE => Want::Text(Lines::Unsure),
        Want::Words(Lines::Across) if confidence < LOW_CONFIDENCE => Want::Words(Lines::Unsure),
        _ => return Ok((engine, page)),
    };
    let (engine, second, second_confidence) = recognize_with(engine, image, again)?;
    tracing::debug!(confidence, second_confidence, "a page read as noise was read again with orientation detection");
    Ok((engine, if second_confidence > confidence { second } else { page }))
}

/// Tesseract's TSV: a header, then one row per layout element; level 5 rows are words:
/// `level page block par line word left top width height conf text`, confidence 0..100 (-1 for
/// non-words).
fn parse_tsv(tsv: &str) -> Vec<OcrWord> {
    tsv.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() < 12 || f[0] != "5" {
                return None;
            }
            let text = f[11].trim();
            let n = |i: usize| f[i].trim().parse::<i32>().ok();
            let conf = f[10].trim().parse::<f32>().ok()?;
            (!text.is_empty() && conf >= 0.0).then(|| OcrWord {
                text: text.to_owned(),
                left: n(6).unwrap_or(0),
                top: n(7).unwrap_or(0),
                width: n(8).unwrap_or(0),
                height: n(9).unwrap_or(0),
                confidence: (conf / 100.0).clamp(0.0, 1.0),
            })
        })
        .collect()
}

fn worker(jobs: &Mutex<Receiver<Job>>) {
    let mut engines: HashMap<&'static str, Tesseract> = HashMap::new();
    loop {
        let job = match jobs.lock() {
            Ok(rx) => match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
            Err(_) => return,
        };
        let langs = job.lang.tesseract_code();
        let engine = match engines.remove(langs) {
            Some(e) => Ok(e),
            None => init(langs),
        };
        let result = engine.and_then(|e| run_job(e, &job.image, job.want)).map(|(engine, page)| {
            // Kept only after a success: a failed engine is dropped and made again next time.
            engines.insert(langs, engine);
            page
        });
        let _ = job.reply.send(result);
    }
}

impl TesseractPool {
    fn run(&self, image: &GrayImage, lang: Language, want: Want) -> Result<RecognizedPage, EngineError> {
        let (reply, answer) = channel();
        self.sender()?
            .send(Job { image: image.clone(), lang, want, reply })
            .map_err(|_| EngineError::Unavailable("the OCR workers stopped".into()))?;
        answer.recv().map_err(|_| EngineError::Unavailable("an OCR worker stopped".into()))?
    }
}

impl OcrEngine for TesseractPool {
    fn recognize(&self, image: &GrayImage, lang: Language, lines: Lines) -> Result<String, EngineError> {
        Ok(self.run(image, lang, Want::Text(lines))?.text)
    }

    fn recognize_words(&self, image: &GrayImage, lang: Language, lines: Lines) -> Result<RecognizedPage, EngineError> {
        self.run(image, lang, Want::Words(lines))
    }

    fn recognize_zone(&self, image: &GrayImage, lang: Language, layout: Segmentation) -> Result<String, EngineError> {
        Ok(self.run(image, lang, Want::Zone(layout))?.text)
    }

    fn ready(&self) -> Result<(), EngineError> {
        self.ready.get_or_init(|| init(Language::French.tesseract_code()).map(drop)).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapters::image_codec::ImageCrateCodec;
    use crate::ocr::deskew;
    use crate::ocr::images::ImageCodec;

    #[test]
    fn tsv_rows_of_level_five_are_words() {
        let tsv = "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tleft\ttop\twidth\theight\tconf\ttext\n\
                   4\t1\t1\t1\t1\t0\t10\t20\t300\t40\t-1\t\n\
                   5\t1\t1\t1\t1\t1\t10\t20\t90\t40\t96.5\tTotal\n\
                   5\t1\t1\t1\t1\t2\t110\t20\t60\t40\t-1\t \n";
        let words = parse_tsv(tsv);
        assert_eq!(words.len(), 1);
        assert_eq!((words[0].text.as_str(), words[0].left, words[0].height), ("Total", 10, 40));
        assert!((words[0].confidence - 0.965).abs() < 1e-6);
    }

    /// The invoice scan turned 5 degrees, as a careless scan would be: the deskewer finds the
    /// angle, and Tesseract reads the amounts on the page it turns back.
    #[test]
    fn a_scan_five_degrees_askew_is_turned_level_and_read() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/ocr/invoice-scan.jpg");
        let scan = ImageCrateCodec.decode_gray(&std::fs::read(path).unwrap()).unwrap();
        let askew = deskew::rotate(&scan, 5.0);
        let found = deskew::estimate_degrees(&askew);
        assert!((found - 5.0).abs() <= 0.5, "found {found}");
        let level = deskew::deskew(&askew).expect("turned back");
        let text = TesseractPool::new(1).recognize(&level, Language::French, Lines::Across).unwrap();
        for expected in ["Total TTC", "120,00"] {
            assert!(text.contains(expected), "{expected:?} not read in {text:?}");
        }
    }
}
