//! The image codec port: decoding uploads into gray pixels within limits, encoding page JPEGs.

use super::engine::GrayImage;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    #[error("the image cannot be decoded: {0}")]
    Unreadable(String),
    #[error("the image is too large to process: {0}")]
    TooLarge(String),
    #[error("the page could not be encoded as JPEG: {0}")]
    Encode(String),
}

pub trait ImageCodec: Send + Sync {
    /// JPEG, PNG or TIFF bytes to gray pixels, turned upright by their EXIF orientation, within the
    /// decoder's memory limits and the service's pixel limit.
    fn decode_gray(&self, bytes: &[u8]) -> Result<GrayImage, ImageError>;

    /// A baseline gray JPEG of `image`.
    fn encode_jpeg(&self, image: &GrayImage) -> Result<Vec<u8>, ImageError>;
}
