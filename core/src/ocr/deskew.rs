//! Deskewing scans and photos before OCR: a page fed a few degrees askew loses words at line ends
//! and splits lines. The angle is found by the projection-profile method (rows of text make the
//! sharpest horizontal profile when they are level) on a reduced copy, then the page is turned
//! back with bilinear sampling. Quarter turns are the engine's own business (its page mode reads
//! pages turned 90/180/270 degrees); this handles the small angles in between.

use super::engine::{GrayImage, Lines};

/// Angles searched, in degrees each side of level.
const MAX_DEGREES: f64 = 6.0;
const STEP_DEGREES: f64 = 0.25;
/// The first pass's step, in degrees.
const COARSE_STEP: f64 = 1.0;
/// Below this the page is left as it is: the engine reads it as well, and the copy costs time.
const MIN_CORRECTION_DEGREES: f64 = 0.4;
/// The reduced copy the angle is measured on has at most this many pixels on its longer side.
const PROBE_SIDE: u32 = 900;

/// A page's lines compared across and down: rows of an upright page alternate between text and
/// the blank between lines, so its row profile is much sharper than its column profile (each
/// column crosses many lines); a page turned a quarter is the other way round. Measured on the
/// reduced copy the skew is measured on.
fn lines_of(small: &[u8], w: u32, h: u32) -> Lines {
    let (mut rows, mut cols) = (vec![0u64; h as usize], vec![0u64; w as usize]);
    for (i, _) in small.iter().enumerate().filter(|(_, p)| **p < 128) {
        rows[i / w as usize] += 1;
        cols[i % w as usize] += 1;
    }
    // Sum of squares times the number of bins over the square of the sum: 1 for an even spread,
    // larger when the dark pixels gather in fewer bins.
    let sharpness = |bins: &[u64]| {
        let total: u64 = bins.iter().sum();
        let squares: f64 = bins.iter().map(|&v| (v as f64) * (v as f64)).sum();
        if total == 0 { 0.0 } else { squares * bins.len() as f64 / (total as f64 * total as f64) }
    };
    let (across, down) = (sharpness(&rows), sharpness(&cols));
    if across > 0.0 && across >= down * ACROSS_MARGIN { Lines::Across } else { Lines::Unsure }
}

/// How much sharper the row profile must be than the column profile to call the lines across
/// (measured on the fixtures: upright scans 2.6-5x, pages turned a quarter 0.2-0.3x, photos
/// 0.8-1.15x).
const ACROSS_MARGIN: f64 = 1.5;

/// The page examined once: its skew and which way its lines run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Examined {
    pub degrees: f64,
    pub lines: Lines,
}

pub fn examine(image: &GrayImage) -> Examined {
    let (small, w, h) = reduce(image);
    Examined { degrees: degrees_of(&small, w, h), lines: lines_of(&small, w, h) }
}

/// The page turned level when it is askew (`None`: level enough already), and which way its lines
/// run, from one reduced copy.
pub fn level(image: &GrayImage) -> (Option<GrayImage>, Lines) {
    let Examined { degrees, lines } = examine(image);
    let turned = (degrees.abs() >= MIN_CORRECTION_DEGREES).then(|| rotate(image, -degrees));
    (turned, lines)
}

/// The skew of the page's text lines, in degrees (positive: lines rise to the right, in image
/// coordinates where y grows downwards).
pub fn estimate_degrees(image: &GrayImage) -> f64 {
    let (small, w, h) = reduce(image);
    degrees_of(&small, w, h)
}

fn degrees_of(small: &[u8], w: u32, h: u32) -> f64 {
    // Dark pixels only, as (x, y) around the centre: the profile of each angle is built from them.
    let (cx, cy) = (f64::from(w) / 2.0, f64::from(h) / 2.0);
    let dark: Vec<(f64, f64)> = small
        .iter()
        .enumerate()
        .filter(|(_, p)| **p < 128)
        .map(|(i, _)| ((i as u32 % w) as f64 - cx, (i as u32 / w) as f64 - cy))
        .collect();
    if dark.len() < 50 || dark.len() > small.len() / 2 {
        return 0.0; // a blank page, or a dark photo: nothing to measure
    }
    let rows = (f64::from(w.max(h)) * 1.5) as usize + 2;
    let mut profile = vec![0u32; rows];
    let mut score_of = |deg: f64| -> f64 {
        let (s, c) = deg.to_radians().sin_cos();
        profile.iter_mut().for_each(|v| *v = 0);
        for &(x, y) in &dark {
            // The row the pixel would land on once the page is turned by -deg.
            let r = (y * c - x * s + rows as f64 / 2.0) as usize;
            if let Some(v) = profile.get_mut(r) {
                *v += 1;
            }
        }
        profile.iter().map(|&v| f64::from(v) * f64::from(v)).sum()
    };
    // Coarse then fine: whole degrees over the range, then quarter degrees around the best one
    // (21 profiles instead of 49; the score falls away on both sides of the true angle).
    let best_of = |degrees: &mut dyn Iterator<Item = f64>, score_of: &mut dyn FnMut(f64) -> f64| {
        degrees.map(|deg| (deg, score_of(deg))).fold((0.0, f64::MIN), |best, d| if d.1 > best.1 { d } else { best })
    };
    let coarse = best_of(&mut (-(MAX_DEGREES as i32)..=MAX_DEGREES as i32).map(f64::from), &mut score_of).0;
    let fine = (COARSE_STEP / STEP_DEGREES) as i32;
    best_of(&mut (-fine..=fine).map(|k| coarse + f64::from(k) * STEP_DEGREES), &mut score_of).0
}

/// The page turned level, or `None` when it is level enough already.
pub fn deskew(image: &GrayImage) -> Option<GrayImage> {
    let deg = estimate_degrees(image);
    if deg.abs() < MIN_CORRECTION_DEGREES {
        return None;
    }
    Some(rotate(image, -deg))
}

/// A copy at most `PROBE_SIDE` pixels on its longer side (each pixel the darkest of its block,
/// so thin strokes survive the reduction).
fn reduce(image: &GrayImage) -> (Vec<u8>, u32, u32) {
    let (w, h) = (image.width(), image.height());
    let f = w.max(h).div_ceil(PROBE_SIDE).max(1);
    let (sw, sh) = (w.div_ceil(f), h.div_ceil(f));
    let mut out = vec![255u8; (sw * sh) as usize];
    let px = image.pixels();
    for (y, row) in px.chunks_exact(w as usize).enumerate() {
        let dst = (y / f as usize) * sw as usize;
        for (slot, block) in out[dst..dst + sw as usize].iter_mut().zip(row.chunks(f as usize)) {
            *slot = block.iter().fold(*slot, |m, &p| m.min(p));
        }
    }
    (out, sw, sh)
}

/// Turns the page by `deg` degrees around its centre; what comes in from outside is white.
pub fn rotate(image: &GrayImage, deg: f64) -> GrayImage {
    let (w, h) = (image.width() as usize, image.height() as usize);
    let px = image.pixels();
    let (s, c) = deg.to_radians().sin_cos();
    let (cx, cy) = (w as f64 / 2.0, h as f64 / 2.0);
    let sample = |x: f64, y: f64| -> f64 {
        if x < 0.0 || y < 0.0 || x > (w - 1) as f64 || y > (h - 1) as f64 {
            return 255.0;
        }
        let (x0, y0) = (x as usize, y as usize);
        let (x1, y1) = ((x0 + 1).min(w - 1), (y0 + 1).min(h - 1));
        let (fx, fy) = (x - x0 as f64, y - y0 as f64);
        let at = |xx: usize, yy: usize| f64::from(px[yy * w + xx]);
        let top = at(x0, y0) * (1.0 - fx) + at(x1, y0) * fx;
        let bottom = at(x0, y1) * (1.0 - fx) + at(x1, y1) * fx;
        top * (1.0 - fy) + bottom * fy
    };
    let mut out = Vec::with_capacity(w * h);
    for y in 0..h {
        let dy = y as f64 - cy;
        for x in 0..w {
            let dx = x as f64 - cx;
            // The source of output pixel (x, y): the inverse turn.
            let sx = dx * c + dy * s + cx;
            let sy = -dx * s + dy * c + cy;
            out.push(sample(sx, sy).round() as u8);
        }
    }
    GrayImage::new(w as u32, h as u32, out).expect("same size as the input")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A white page with horizontal dark "lines of text", as a scanner would see it.
    fn page() -> GrayImage {
        let (w, h) = (1200u32, 1600u32);
        let mut px = vec![255u8; (w * h) as usize];
        for line in 0..30 {
            let y0 = 100 + line * 45;
            for y in y0..y0 + 14 {
                for x in 150..1050 {
                    // Words: gaps every so often.
                    if (x / 37) % 5 != 4 {
                        px[(y * w + x) as usize] = 20;
                    }
                }
            }
        }
        GrayImage::new(w, h, px).unwrap()
    }

    #[test]
    fn finds_and_undoes_a_small_skew_either_way() {
        let level = page();
        assert!(estimate_degrees(&level).abs() < 0.3, "a level page reads level");
        assert!(deskew(&level).is_none(), "and is left alone");
        for tilt in [3.0, -2.5, 5.0] {
            let skewed = rotate(&level, tilt);
            let found = estimate_degrees(&skewed);
            assert!((found - tilt).abs() <= 0.5, "tilt {tilt}: found {found}");
            let fixed = deskew(&skewed).expect("a skewed page is turned back");
            assert!(estimate_degrees(&fixed).abs() <= 0.5, "tilt {tilt}: level after");
        }
    }

    /// The fixtures' scans: upright ones (level or askew) read across, those turned a quarter do not;
    /// photos may go either way (the engine then looks for the orientation, as before).
    #[test]
    fn lines_run_across_upright_pages_and_down_sideways_ones() {
        use crate::ocr::images::ImageCodec;
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures");
        let codec = crate::adapters::image_codec::ImageCrateCodec;
        let mut wrong = Vec::new();
        let mut names: Vec<_> = std::fs::read_dir(root.join("invoices/generated"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "jpg"))
            .collect();
        names.extend(["invoice-scan.jpg", "invoice-rotated.jpg"].map(|n| root.join("ocr").join(n)));
        for path in names {
            let image = codec.decode_gray(&std::fs::read(&path).unwrap()).unwrap();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let expected = if name.contains("rotated") { Lines::Unsure } else { Lines::Across };
            let got = examine(&image).lines;
            if got != expected && !name.contains("photo") {
                wrong.push(name);
            }
        }
        assert!(wrong.is_empty(), "{wrong:?}");
        let blank = GrayImage::new(300, 400, vec![255; 300 * 400]).unwrap();
        assert_eq!(examine(&blank).lines, Lines::Unsure, "nothing to tell: the engine looks");
    }

    #[test]
    fn blank_and_tiny_pages_are_left_alone() {
        let blank = GrayImage::new(300, 400, vec![255; 300 * 400]).unwrap();
        assert!(deskew(&blank).is_none());
        let dot = GrayImage::new(1, 1, vec![0]).unwrap();
        assert!(deskew(&dot).is_none());
    }
}
