//! Words grouped into rows (same height on the page) and rows cut into cells (runs of words
//! separated by less than a column gap), the structure labels and values are looked up in.

use crate::ocr::engine::OcrWord;

#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    pub text: String,
    pub left: i32,
    pub right: i32,
    pub confidence: f32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub cells: Vec<Cell>,
    pub top: i32,
    pub bottom: i32,
}

impl Row {
    /// The row's text, cells joined by a column gap.
    pub fn text(&self) -> String {
        self.cells.iter().map(|c| c.text.as_str()).collect::<Vec<_>>().join("   ")
    }

    pub fn confidence(&self) -> f32 {
        if self.cells.is_empty() {
            return 0.0;
        }
        self.cells.iter().map(|c| c.confidence).sum::<f32>() / self.cells.len() as f32
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Layout {
    pub rows: Vec<Row>,
}

fn median(mut v: Vec<i32>) -> i32 {
    if v.is_empty() {
        return 1;
    }
    v.sort_unstable();
    v[v.len() / 2].max(1)
}

impl Layout {
    pub fn from_words(words: &[OcrWord]) -> Self {
        let mut words: Vec<&OcrWord> = words.iter().filter(|w| !w.text.trim().is_empty() && w.height > 0).collect();
        words.sort_by_key(|w| (w.top + w.height / 2, w.left));
        // Rows: a word joins the row it overlaps most vertically, if by half its height or the
        // row's (labels and values differ in height: "Rechnungsdatum:" and "16.08.2026").
        let mut rows: Vec<(i32, i32, Vec<&OcrWord>)> = Vec::new();
        for w in words {
            let (top, bottom) = (w.top, w.top + w.height);
            let overlap = |r: &(i32, i32, Vec<&OcrWord>)| {
                let o = bottom.min(r.1) - top.max(r.0);
                let need = (w.height.min(r.1 - r.0) / 2).max(1);
                (o >= need).then_some(o)
            };
            let n = rows.len();
            let best =
                (n.saturating_sub(4)..n).filter_map(|i| overlap(&rows[i]).map(|o| (i, o))).max_by_key(|(_, o)| *o);
            match best {
                Some((i, _)) => rows[i].2.push(w),
                None => rows.push((top, bottom, vec![w])),
            }
        }
        let rows: Vec<Vec<&OcrWord>> = rows.into_iter().map(|(_, _, r)| r).collect();
        let rows = rows
            .into_iter()
            .map(|mut r| {
                r.sort_by_key(|w| w.left);
                let height = median(r.iter().map(|w| w.height).collect());
                // A column gap is wider than the row's text is tall (two spaces on the grid).
                let gap = height * 9 / 10;
                let mut cells: Vec<(Cell, usize)> = Vec::new();
                for w in &r {
                    match cells.last_mut() {
                        Some((c, n)) if w.left - c.right <= gap => {
                            c.text.push(' ');
                            c.text.push_str(&w.text);
                            c.right = c.right.max(w.left + w.width);
                            c.confidence += w.confidence;
                            *n += 1;
                        }
                        _ => cells.push((
                            Cell {
                                text: w.text.clone(),
                                left: w.left,
                                right: w.left + w.width,
                                confidence: w.confidence,
                            },
                            1,
                        )),
                    }
                }
                let cells = cells
                    .into_iter()
                    .map(|(mut c, n)| {
                        c.confidence /= n as f32;
                        c
                    })
                    .collect();
                let top = r.iter().map(|w| w.top).min().unwrap_or(0);
                let bottom = r.iter().map(|w| w.top + w.height).max().unwrap_or(0);
                Row { cells, top, bottom }
            })
            .collect();
        Self { rows }
    }

    /// All rows' text, one row a line.
    pub fn text(&self) -> String {
        self.rows.iter().map(Row::text).collect::<Vec<_>>().join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ocr::invoice::words::from_layout_text;

    #[test]
    fn rows_and_cells_from_the_layout_grid() {
        let layout = Layout::from_words(&from_layout_text("Facture FA-1     Date : 13/11/2017\nTotal HT    624,90 €"));
        assert_eq!(layout.rows.len(), 2);
        let cells: Vec<&str> = layout.rows[0].cells.iter().map(|c| c.text.as_str()).collect();
        assert_eq!(cells, ["Facture FA-1", "Date : 13/11/2017"]);
        assert_eq!(layout.rows[1].cells[1].text, "624,90 €");
    }
}
