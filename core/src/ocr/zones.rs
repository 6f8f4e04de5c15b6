//! Zones of a page: the rectangles a client draws on the page image it was shown (at its zoom,
//! `ratio`), brought back to image pixels, clamped to the page, cut out and read on their own.

use super::engine::{GrayImage, Segmentation};
pub use super::model::PixelRect;

/// The most zones one request may ask for: a page has a dozen fields, not hundreds.
pub const MAX_ZONES: usize = 50;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZoneError {
    #[error("rect {0:?} is not x:y:w:h (four numbers)")]
    Malformed(String),
    #[error("rect {0:?} is empty or negative: width and height must be above zero")]
    Empty(String),
    #[error("rect {rect:?} lies outside the page ({width}x{height} pixels at ratio 1)")]
    OutsidePage { rect: String, width: u32, height: u32 },
    #[error("ratio {0:?} is not a zoom factor above 0 and at most 100")]
    Ratio(String),
    #[error("{0} zones in one request, more than the {MAX_ZONES} allowed")]
    TooMany(usize),
    #[error("{0}")]
    Shape(String),
}

/// The zoom at which the page image was shown: displayed pixels = image pixels x ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratio(f64);

impl Ratio {
    pub const ONE: Ratio = Ratio(1.0);

    pub fn parse(s: &str) -> Result<Self, ZoneError> {
        let s = s.trim();
        // Clients in French locales send "1,5".
        match s.replace(',', ".").parse::<f64>() {
            Ok(r) if r.is_finite() && r > 0.0 && r <= 100.0 => Ok(Self(r)),
            _ => Err(ZoneError::Ratio(s.chars().take(40).collect())),
        }
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

/// A zone as the client drew it, in displayed pixels.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Zone {
    x: f64,
    y: f64,
    w: f64,
    h: f64,
}

impl Zone {
    /// `x:y:w:h`; the numbers may have decimals. Width and height must be above zero.
    pub fn parse(s: &str) -> Result<Self, ZoneError> {
        let shown = || s.trim().chars().take(60).collect::<String>();
        let parts: Vec<f64> = s
            .trim()
            .split(':')
            .map(|p| p.trim().parse::<f64>().ok().filter(|n| n.is_finite()))
            .collect::<Option<_>>()
            .ok_or_else(|| ZoneError::Malformed(shown()))?;
        let [x, y, w, h] = parts.as_slice() else { return Err(ZoneError::Malformed(shown())) };
        if *w <= 0.0 || *h <= 0.0 {
            return Err(ZoneError::Empty(shown()));
        }
        Ok(Self { x: *x, y: *y, w: *w, h: *h })
    }

    /// In image pixels at `ratio`, without a page to clamp to (zones remembered for a supplier).
    pub fn at_scale(&self, ratio: Ratio) -> Result<PixelRect, ZoneError> {
        self.on_page(ratio, u32::MAX, u32::MAX)
    }

    /// In image pixels at `ratio`, clamped to a `width` x `height` page. A zone that keeps less
    /// than a pixel once clamped lies outside the page.
    pub fn on_page(&self, ratio: Ratio, width: u32, height: u32) -> Result<PixelRect, ZoneError> {
        let r = ratio.get();
        let clamp = |v: f64, max: u32| (v / r).round().clamp(0.0, f64::from(max)) as u32;
        let (x0, y0) = (clamp(self.x, width), clamp(self.y, height));
        let (x1, y1) = (clamp(self.x + self.w, width), clamp(self.y + self.h, height));
        if x1 <= x0 || y1 <= y0 {
            return Err(ZoneError::OutsidePage {
                rect: format!("{}:{}:{}:{}", self.x, self.y, self.w, self.h),
                width,
                height,
            });
        }
        Ok(PixelRect { x: x0, y: y0, w: x1 - x0, h: y1 - y0 })
    }
}

/// The zone's pixels, made easy to read: small text scaled up (Tesseract reads best with
/// capitals 20-30 pixels high) and a white margin around (glyphs touching the edge are lost).
pub fn cut_out(page: &GrayImage, r: PixelRect) -> Option<GrayImage> {
    let (pw, ph) = (page.width(), page.height());
    if r.x >= pw || r.y >= ph || r.w == 0 || r.h == 0 {
        return None;
    }
    let (w, h) = (r.w.min(pw - r.x), r.h.min(ph - r.y));
    let scale = if h < 48 { (48u32.div_ceil(h)).min(4) } else { 1 };
    const MARGIN: u32 = 16;
    let (ow, oh) = (w * scale + 2 * MARGIN, h * scale + 2 * MARGIN);
    let mut out = vec![255u8; (ow as usize) * (oh as usize)];
    let src = page.pixels();
    for oy in 0..h * scale {
        let sy = (r.y + oy / scale) as usize;
        let row = &src[sy * pw as usize..(sy + 1) * pw as usize];
        let dst = ((oy + MARGIN) * ow + MARGIN) as usize;
        for ox in 0..w * scale {
            out[dst + ox as usize] = row[(r.x + ox / scale) as usize];
        }
    }
    GrayImage::new(ow, oh, out)
}

/// One line of text or a block of several: counted from the bands of rows that hold ink.
pub fn segmentation(zone: &GrayImage) -> Segmentation {
    let w = zone.width() as usize;
    let min_ink = (w / 100).max(1);
    let mut bands = 0;
    let mut in_band = false;
    for row in zone.pixels().chunks_exact(w) {
        let ink = row.iter().filter(|p| **p < 128).count() >= min_ink;
        if ink && !in_band {
            bands += 1;
        }
        in_band = ink;
    }
    if bands <= 1 { Segmentation::Line } else { Segmentation::Block }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zones_parse_and_come_back_to_image_pixels() {
        let z = Zone::parse("100:50:200.5:40").unwrap();
        assert_eq!(
            z.on_page(Ratio::parse("2").unwrap(), 1000, 1000).unwrap(),
            PixelRect { x: 50, y: 25, w: 100, h: 20 }
        );
        assert_eq!(z.on_page(Ratio::ONE, 1000, 1000).unwrap().as_text(), "100:50:201:40");
        // Clamped to the page.
        let big = Zone::parse("-10:-10:5000:5000").unwrap();
        assert_eq!(big.on_page(Ratio::ONE, 800, 600).unwrap(), PixelRect { x: 0, y: 0, w: 800, h: 600 });
        assert!(matches!(
            Zone::parse("900:10:50:50").unwrap().on_page(Ratio::ONE, 800, 600),
            Err(ZoneError::OutsidePage { .. })
        ));
        assert_eq!(Ratio::parse("1,5").unwrap().get(), 1.5);
        for bad in ["", "1:2:3", "a:b:c:d", "1:2:3:4:5", "NaN:1:1:1", "inf:0:1:1"] {
            assert!(matches!(Zone::parse(bad), Err(ZoneError::Malformed(_))), "{bad}");
        }
        for empty in ["0:0:0:10", "0:0:10:-1", "5:5:-3:4"] {
            assert!(matches!(Zone::parse(empty), Err(ZoneError::Empty(_))), "{empty}");
        }
        for bad in ["0", "-1", "abc", "1e9", "NaN"] {
            assert!(Ratio::parse(bad).is_err(), "{bad}");
        }
    }

    fn page_with_lines(lines: &[u32]) -> GrayImage {
        let (w, h) = (200u32, 100u32);
        let mut px = vec![255u8; (w * h) as usize];
        for &y in lines {
            for row in y..y + 8 {
                for x in 20..180 {
                    px[(row * w + x) as usize] = 0;
                }
            }
        }
        GrayImage::new(w, h, px).unwrap()
    }

    #[test]
    fn a_cut_is_scaled_up_when_small_and_framed_in_white() {
        let page = page_with_lines(&[10]);
        let zone = cut_out(&page, PixelRect { x: 10, y: 5, w: 100, h: 20 }).unwrap();
        assert_eq!((zone.width(), zone.height()), (100 * 3 + 32, 20 * 3 + 32));
        assert!(zone.pixels()[..zone.width() as usize * 16].iter().all(|p| *p == 255), "white margin");
        assert_eq!(segmentation(&zone), Segmentation::Line);
        let block = cut_out(&page_with_lines(&[10, 40, 70]), PixelRect { x: 0, y: 0, w: 200, h: 100 }).unwrap();
        assert_eq!(segmentation(&block), Segmentation::Block);
        assert!(cut_out(&page, PixelRect { x: 500, y: 0, w: 10, h: 10 }).is_none());
    }
}
