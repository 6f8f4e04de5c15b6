//! Positioned words from either source: a text layer laid out by `pdftotext -layout` (a character
//! grid: the column is x, the line is y) or the OCR engine's boxes, turned upright when the engine
//! read a page lying on its side.

use crate::ocr::engine::OcrWord;

/// The grid's cell: a character is 10 units wide, a line 20 high (words 16 high, so that two
/// spaces between words, the layout's column gap, are wider than a word is tall).
pub const CHAR_WIDTH: i32 = 10;
pub const LINE_HEIGHT: i32 = 20;
const WORD_HEIGHT: i32 = 16;

/// Words of a text laid out in columns; pages (form feeds) follow each other downwards.
pub fn from_layout_text(text: &str) -> Vec<OcrWord> {
    let mut words = Vec::new();
    let mut line_no = 0i32;
    for page in text.split('\x0c') {
        for line in page.lines() {
            let mut start: Option<(i32, String)> = None;
            for (col, c) in (0i32..).zip(line.chars().chain(std::iter::once(' '))) {
                if c.is_whitespace() {
                    if let Some((at, w)) = start.take() {
                        let width = w.chars().count() as i32 * CHAR_WIDTH;
                        words.push(OcrWord {
                            text: w,
                            left: at * CHAR_WIDTH,
                            top: line_no * LINE_HEIGHT,
                            width,
                            height: WORD_HEIGHT,
                            confidence: 1.0,
                        });
                    }
                } else {
                    match &mut start {
                        Some((_, w)) => w.push(c),
                        None => start = Some((col, c.to_string())),
                    }
                }
            }
            line_no += 1;
        }
        // A gap between pages, so that no row spans two.
        line_no += 2;
    }
    words
}

/// Which way the engine's words read, from consecutive words of the same size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    Right,
    Down,
    Left,
    Up,
}

/// Turns words read on a page lying on its side (boxes in the image's frame) so that text reads
/// left to right and lines follow downwards.
pub fn upright(words: Vec<OcrWord>) -> Vec<OcrWord> {
    let mut votes = [0usize; 4];
    for pair in words.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let (ax, ay) = (a.left + a.width / 2, a.top + a.height / 2);
        let (bx, by) = (b.left + b.width / 2, b.top + b.height / 2);
        let (dx, dy) = (bx - ax, by - ay);
        // Consecutive words of one line are close; a jump to the next line or block is not a vote.
        let size = a.height.min(a.width).max(b.height.min(b.width)).max(1);
        if dx.abs().max(dy.abs()) > size * 12 {
            continue;
        }
        let dir = if dx.abs() >= dy.abs() {
            if dx >= 0 { Reading::Right } else { Reading::Left }
        } else if dy >= 0 {
            Reading::Down
        } else {
            Reading::Up
        };
        votes[dir as usize] += 1;
    }
    let dir = [Reading::Right, Reading::Down, Reading::Left, Reading::Up]
        .into_iter()
        .max_by_key(|d| votes[*d as usize])
        .unwrap_or(Reading::Right);
    if dir == Reading::Right {
        return words;
    }
    words
        .into_iter()
        .map(|w| {
            let (x0, y0, x1, y1) = (w.left, w.top, w.left + w.width, w.top + w.height);
            // New x along the reading direction, new y along the line progression.
            let (nx0, ny0, nx1, ny1) = match dir {
                Reading::Down => (y0, -x1, y1, -x0),
                Reading::Up => (-y1, x0, -y0, x1),
                Reading::Left => (-x1, -y1, -x0, -y0),
                Reading::Right => (x0, y0, x1, y1),
            };
            OcrWord { left: nx0, top: ny0, width: nx1 - nx0, height: ny1 - ny0, ..w }
        })
        .collect()
}

/// Removes the slant of a photographed page (rows that climb or fall across the page): the
/// median slope between neighbouring words of one line, undone by shearing every box.
pub fn level(words: Vec<OcrWord>) -> Vec<OcrWord> {
    let mut slopes: Vec<f64> = words
        .windows(2)
        .filter_map(|p| {
            let (a, b) = (&p[0], &p[1]);
            let dx = f64::from((b.left + b.width / 2) - (a.left + a.width / 2));
            let dy = f64::from((b.top + b.height) - (a.top + a.height));
            let h = f64::from(a.height.max(b.height).max(1));
            (dx > h && dx < 15.0 * h && dy.abs() < 0.6 * h).then(|| dy / dx)
        })
        .collect();
    if slopes.len() < 8 {
        return words;
    }
    slopes.sort_by(f64::total_cmp);
    let slope = slopes[slopes.len() / 2];
    if slope.abs() < 0.002 {
        return words;
    }
    words
        .into_iter()
        .map(|w| {
            let mid = f64::from(w.left + w.width / 2);
            OcrWord { top: w.top - (slope * mid).round() as i32, ..w }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_grid_keeps_columns_and_lines() {
        let words = from_layout_text("Total HT      100,00 €\n\nTVA 20%        20,00 €");
        let texts: Vec<(&str, i32, i32)> = words.iter().map(|w| (w.text.as_str(), w.left, w.top)).collect();
        assert_eq!(texts[0], ("Total", 0, 0));
        assert_eq!(texts[2], ("100,00", 140, 0));
        assert_eq!(texts[4], ("TVA", 0, 40));
    }

    #[test]
    fn words_read_downwards_are_turned_upright() {
        let w =
            |text: &str, left, top| OcrWord { text: text.into(), left, top, width: 30, height: 100, confidence: 1.0 };
        // A page turned 90 degrees clockwise: a line reads downwards, the next line is to its left.
        let words = upright(vec![w("Total", 500, 100), w("TTC", 500, 220), w("120,00", 500, 340), w("TVA", 440, 100)]);
        assert!(words[0].left < words[1].left && words[1].left < words[2].left);
        assert!(words[3].top > words[0].top);
    }
}
