//! A one-page PDF around a JPEG (the `pdfBase64` of an image upload): the JPEG embedded as it is
//! (DCTDecode), the page sized to the image at 72 dpi. Written by hand: six objects.

/// Width and height of a baseline or progressive JPEG, from its SOF segment; `None` when the
/// bytes are not a JPEG whose segments can be walked.
pub fn jpeg_dimensions(jpeg: &[u8]) -> Option<(u32, u32)> {
    if !jpeg.starts_with(&[0xFF, 0xD8]) {
        return None;
    }
    let mut i = 2;
    while i + 4 <= jpeg.len() {
        if jpeg[i] != 0xFF {
            return None;
        }
        let marker = jpeg[i + 1];
        // Fill bytes and markers without a length.
        if marker == 0xFF {
            i += 1;
            continue;
        }
        if (0xD0..=0xD9).contains(&marker) || marker == 0x01 {
            i += 2;
            continue;
        }
        let len = usize::from(u16::from_be_bytes([jpeg[i + 2], jpeg[i + 3]]));
        if matches!(marker, 0xC0..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF) {
            let sof = jpeg.get(i + 4..i + 9)?;
            let h = u32::from(u16::from_be_bytes([sof[1], sof[2]]));
            let w = u32::from(u16::from_be_bytes([sof[3], sof[4]]));
            return (w > 0 && h > 0).then_some((w, h));
        }
        if len < 2 {
            return None;
        }
        i += 2 + len;
    }
    None
}

/// Number of colour components of the JPEG's frame (1 gray, 3 YCbCr, 4 CMYK).
fn jpeg_components(jpeg: &[u8]) -> u8 {
    let mut i = 2;
    while i + 10 <= jpeg.len() && jpeg[i] == 0xFF {
        let marker = jpeg[i + 1];
        let len = usize::from(u16::from_be_bytes([jpeg[i + 2], jpeg[i + 3]]));
        if matches!(marker, 0xC0..=0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF) {
            return jpeg[i + 9];
        }
        i += 2 + len.max(2);
    }
    3
}

/// The PDF, or `None` when `jpeg` is not a JPEG whose size can be read.
pub fn pdf_around_jpeg(jpeg: &[u8]) -> Option<Vec<u8>> {
    let (w, h) = jpeg_dimensions(jpeg)?;
    let colour_space = match jpeg_components(jpeg) {
        1 => "/DeviceGray",
        4 => "/DeviceCMYK",
        _ => "/DeviceRGB",
    };
    let content = format!("q {w} 0 0 {h} 0 0 cm /Im0 Do Q");
    let objects: Vec<Vec<u8>> = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        format!("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {w} {h}] /Resources << /XObject << /Im0 5 0 R >> >> /Contents 4 0 R >>")
            .into_bytes(),
        [format!("<< /Length {} >>\nstream\n", content.len()).as_bytes(), content.as_bytes(), b"\nendstream"].concat(),
        [
            format!(
                "<< /Type /XObject /Subtype /Image /Width {w} /Height {h} /ColorSpace {colour_space} /BitsPerComponent 8 /Filter /DCTDecode /Length {} >>\nstream\n",
                jpeg.len()
            )
            .as_bytes(),
            jpeg,
            b"\nendstream",
        ]
        .concat(),
    ];
    let mut out = b"%PDF-1.4\n%\xE2\xE3\xCF\xD3\n".to_vec();
    let mut offsets = Vec::with_capacity(objects.len());
    for (n, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", n + 1).as_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for off in offsets {
        out.extend_from_slice(format!("{off:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!("trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n", objects.len() + 1).as_bytes(),
    );
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SOI, an APP0 of 4 bytes, SOF0 of a 3x2 gray frame, EOI.
    const TINY: &[u8] =
        &[0xFF, 0xD8, 0xFF, 0xE0, 0, 4, 0, 0, 0xFF, 0xC0, 0, 11, 8, 0, 2, 0, 3, 1, 1, 0x11, 0, 0xFF, 0xD9];

    #[test]
    fn reads_the_frame_size() {
        assert_eq!(jpeg_dimensions(TINY), Some((3, 2)));
        assert_eq!(jpeg_components(TINY), 1);
        assert_eq!(jpeg_dimensions(b"%PDF"), None);
        assert_eq!(jpeg_dimensions(&TINY[..10]), None);
        assert_eq!(jpeg_dimensions(&[0xFF, 0xD8, 0xFF, 0xE0, 0, 0]), None);
    }

    #[test]
    fn the_pdf_embeds_the_jpeg_whole_with_a_valid_xref() {
        let pdf = pdf_around_jpeg(TINY).unwrap();
        assert!(pdf.starts_with(b"%PDF-1.4"));
        assert!(pdf.windows(TINY.len()).any(|w| w == TINY));
        let text = String::from_utf8_lossy(&pdf);
        assert!(text.contains("/MediaBox [0 0 3 2]") && text.contains("/DeviceGray"));
        let start: usize = text.rsplit("startxref\n").next().unwrap().lines().next().unwrap().parse().unwrap();
        assert!(pdf[start..].starts_with(b"xref"));
    }
}
