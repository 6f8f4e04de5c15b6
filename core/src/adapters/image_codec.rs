//! The image codec: `image` decodes uploads with its default memory limits (and a pixel cap of our
//! own, because leptonica has none: a 16000x16000 JPEG took 2 GB there), turns them upright by
//! their EXIF orientation, and hands over gray pixels; `jpeg-encoder` (simd) writes page JPEGs,
//! ~2.5x faster than `image`'s own encoder (shared/design/stack.md).

use crate::ocr::engine::GrayImage;
use crate::ocr::images::{ImageCodec, ImageError};
use image::{DynamicImage, ImageDecoder, ImageReader, Limits};
use std::io::Cursor;

/// 100 megapixels: an A3 page at 600 dpi is 70; beyond is no document scan.
pub const MAX_PIXELS: u64 = 100_000_000;
/// JPEG quality of page images: text stays sharp for a zone's OCR, a 300 dpi A4 page ~0.5 MB.
const JPEG_QUALITY: u8 = 85;

#[derive(Debug, Default)]
pub struct ImageCrateCodec;

impl ImageCodec for ImageCrateCodec {
    fn decode_gray(&self, bytes: &[u8]) -> Result<GrayImage, ImageError> {
        let unreadable = |e: image::ImageError| match e {
            image::ImageError::Limits(l) => ImageError::TooLarge(l.to_string()),
            other => ImageError::Unreadable(other.to_string()),
        };
        let mut reader = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| ImageError::Unreadable(e.to_string()))?;
        reader.limits(Limits::default());
        let mut decoder = reader.into_decoder().map_err(unreadable)?;
        let (w, h) = decoder.dimensions();
        if u64::from(w) * u64::from(h) > MAX_PIXELS {
            return Err(ImageError::TooLarge(format!("{w}x{h} pixels, over {MAX_PIXELS}")));
        }
        let orientation = decoder.orientation().map_err(unreadable)?;
        let mut image = DynamicImage::from_decoder(decoder).map_err(unreadable)?;
        image.apply_orientation(orientation);
        let gray = image.into_luma8();
        let (w, h) = gray.dimensions();
        GrayImage::new(w, h, gray.into_raw()).ok_or_else(|| ImageError::Unreadable("empty image".into()))
    }

    fn encode_jpeg(&self, image: &GrayImage) -> Result<Vec<u8>, ImageError> {
        let (Ok(w), Ok(h)) = (u16::try_from(image.width()), u16::try_from(image.height())) else {
            return Err(ImageError::Encode(format!("{}x{} is over JPEG's 65535 limit", image.width(), image.height())));
        };
        let mut out = Vec::with_capacity(image.pixels().len() / 8);
        jpeg_encoder::Encoder::new(&mut out, JPEG_QUALITY)
            .encode(image.pixels(), w, h, jpeg_encoder::ColorType::Luma)
            .map_err(|e| ImageError::Encode(e.to_string()))?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_and_decodes_gray_pages() {
        let codec = ImageCrateCodec;
        let pixels: Vec<u8> = (0..64 * 32).map(|i| (i % 251) as u8).collect();
        let page = GrayImage::new(64, 32, pixels).unwrap();
        let jpeg = codec.encode_jpeg(&page).unwrap();
        assert!(jpeg.starts_with(&[0xFF, 0xD8]));
        let back = codec.decode_gray(&jpeg).unwrap();
        assert_eq!((back.width(), back.height()), (64, 32));
        assert!(matches!(codec.decode_gray(b"\xFF\xD8\xFF garbage"), Err(ImageError::Unreadable(_))));
    }
}
