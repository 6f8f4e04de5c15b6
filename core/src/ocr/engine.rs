//! The OCR engine port: text out of decoded, size-limited gray pixels.

/// A decoded page or photo, 8-bit gray, row-major, no padding. The only thing an OCR engine is
/// ever fed: never the untrusted file itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrayImage {
    width: u32,
    height: u32,
    pixels: Vec<u8>,
}

impl GrayImage {
    /// `None` when the buffer does not hold exactly `width * height` pixels or a side is zero.
    pub fn new(width: u32, height: u32, pixels: Vec<u8>) -> Option<Self> {
        let expected = (width as usize).checked_mul(height as usize)?;
        (width > 0 && height > 0 && pixels.len() == expected).then_some(Self { width, height, pixels })
    }

    pub fn width(&self) -> u32 {
        self.width
    }

    pub fn height(&self) -> u32 {
        self.height
    }

    pub fn pixels(&self) -> &[u8] {
        &self.pixels
    }
}

/// The languages the service reads. Clients send ISO 639-1 (`fr`) or Tesseract's codes (`fra`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    French,
    German,
    Italian,
    English,
}

impl Language {
    pub const ALL: [Language; 4] = [Language::French, Language::German, Language::Italian, Language::English];

    pub fn parse(s: &str) -> Option<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "fr" | "fra" | "fre" => Some(Language::French),
            "de" | "deu" | "ger" => Some(Language::German),
            "it" | "ita" => Some(Language::Italian),
            "en" | "eng" => Some(Language::English),
            _ => None,
        }
    }

    /// ISO 639-1, the stored and wire form.
    pub fn iso(self) -> &'static str {
        match self {
            Language::French => "fr",
            Language::German => "de",
            Language::Italian => "it",
            Language::English => "en",
        }
    }

    /// Tesseract's (ISO 639-2/T) code, the `lang` of the `srvlangs` entries, and the one trained
    /// model the engine loads for the language: what `tesseract -l` is given. (Until issue 17 the
    /// engine loaded English first, `eng+fra`, because `fra` alone once read "Total TTC" as "Total
    /// TIC"; the extraction floors hold with the language alone, and a page costs a fifth less.)
    pub fn tesseract_code(self) -> &'static str {
        match self {
            Language::French => "fra",
            Language::German => "deu",
            Language::Italian => "ita",
            Language::English => "eng",
        }
    }

    /// The language's own name, as a client's language chooser shows it.
    pub fn native_name(self) -> &'static str {
        match self {
            Language::French => "Français",
            Language::German => "Deutsch",
            Language::Italian => "Italiano",
            Language::English => "English",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error("the OCR engine is not available: {0}")]
    Unavailable(String),
    #[error("the OCR engine failed on this image: {0}")]
    Failed(String),
}

/// Which way a whole page's lines of text run, as far as a glance before reading tells
/// (`deskew::examine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lines {
    /// Across the page (upright, or upside down): the engine segments it without first detecting
    /// its orientation, which costs a third of a page's time.
    Across,
    /// Down the page (turned a quarter), or not clearly across: the engine detects the orientation.
    Unsure,
}

/// How the text of a zone is laid out, which decides how the engine segments it: a whole page
/// is analysed for columns and orientation, which on a small cut finds noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segmentation {
    /// One line of text (an amount, a date, a number).
    Line,
    /// One block of several lines (an address).
    Block,
}

/// One recognised word with its box in the image's pixels (origin top left) and the engine's
/// confidence in it, 0..1. Invoice extraction reads labels and the values beside or below them
/// from these positions, which flat text loses.
#[derive(Debug, Clone, PartialEq)]
pub struct OcrWord {
    pub text: String,
    pub left: i32,
    pub top: i32,
    pub width: i32,
    pub height: i32,
    pub confidence: f32,
}

/// A page read once, as text (the `result`) and as positioned words (for extraction).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RecognizedPage {
    pub text: String,
    pub words: Vec<OcrWord>,
}

/// Reads text. Implementations keep initialised engines and are shared by every request thread.
pub trait OcrEngine: Send + Sync {
    fn recognize(&self, image: &GrayImage, lang: Language, lines: Lines) -> Result<String, EngineError>;

    /// Reads a zone cut out of a page, segmented as `layout` says.
    fn recognize_zone(&self, image: &GrayImage, lang: Language, layout: Segmentation) -> Result<String, EngineError>;

    /// The page's text and its words with their boxes, from ONE recognition (a second pass
    /// would double the ~0.6 s a page costs). The default lays the text of [`Self::recognize`]
    /// on a character grid (no confidence), for engines that give no positions.
    fn recognize_words(&self, image: &GrayImage, lang: Language, lines: Lines) -> Result<RecognizedPage, EngineError> {
        let text = self.recognize(image, lang, lines)?;
        let words = crate::ocr::invoice::words::from_layout_text(&text);
        Ok(RecognizedPage { text, words })
    }

    /// Whether the engine can start (for `ruok`): initialises one if none is.
    fn ready(&self) -> Result<(), EngineError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_code_families_are_accepted() {
        for (s, l) in [
            ("fr", Language::French),
            ("FRA", Language::French),
            ("deu", Language::German),
            ("it", Language::Italian),
            ("en", Language::English),
        ] {
            assert_eq!(Language::parse(s), Some(l), "{s}");
        }
        assert_eq!(Language::parse("es"), None);
        assert_eq!(Language::parse(""), None);
        assert_eq!(Language::French.tesseract_code(), "fra");
    }

    #[test]
    fn an_image_holds_exactly_its_pixels() {
        assert!(GrayImage::new(2, 2, vec![0; 4]).is_some());
        assert!(GrayImage::new(2, 2, vec![0; 3]).is_none());
        assert!(GrayImage::new(0, 0, vec![]).is_none());
        assert!(GrayImage::new(u32::MAX, u32::MAX, vec![]).is_none());
    }
}
