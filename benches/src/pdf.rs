//! PDFs written byte by byte for the tests and benchmarks of the PDF sandbox's limits (issue 16):
//! the bomb a user could send, built the same way by both, so that the benchmark times what the
//! tests refuse.

/// A PDF of `pages` pages from raw bytes, with a correct cross-reference table: each page draws
/// `content`; `image` (a stream dictionary's entries and its data) is the page resource `/Im0`.
pub fn pdf(pages: usize, content: &[u8], image: Option<(&str, &[u8])>) -> Vec<u8> {
    let mut objects: Vec<Vec<u8>> = vec![b"<</Type/Catalog/Pages 2 0 R>>".to_vec()];
    let kids: Vec<String> = (0..pages).map(|i| format!("{} 0 R", 5 + i)).collect();
    objects.push(format!("<</Type/Pages/Kids[{}]/Count {pages}>>", kids.join(" ")).into_bytes());
    let stream = |dict: &str, data: &[u8]| {
        let mut o = format!("<<{dict}/Length {}>>stream\n", data.len()).into_bytes();
        o.extend_from_slice(data);
        o.extend_from_slice(b"\nendstream");
        o
    };
    objects.push(stream("", content));
    objects.push(match image {
        Some((dict, data)) => stream(dict, data),
        None => b"null".to_vec(),
    });
    let resources = if image.is_some() { "/Resources<</XObject<</Im0 4 0 R>>>>" } else { "" };
    for _ in 0..pages {
        objects
            .push(format!("<</Type/Page/Parent 2 0 R/MediaBox[0 0 595 842]{resources}/Contents 3 0 R>>").into_bytes());
    }
    let mut out = b"%PDF-1.4\n".to_vec();
    let mut offsets = Vec::new();
    for (i, o) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n", i + 1).as_bytes());
        out.extend_from_slice(o);
        out.extend_from_slice(b"\nendobj\n");
    }
    let xref = out.len();
    out.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for o in offsets {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!("trailer\n<</Size {}/Root 1 0 R>>\nstartxref\n{xref}\n%%EOF\n", objects.len() + 1).as_bytes(),
    );
    out
}

/// The bomb: under 1 KB, each page drawing one gray image declared 100,000 x 100,000
/// pixels (poppler took 13-14 s a page on it).
pub fn bomb(pages: usize) -> Vec<u8> {
    let image = "/Type/XObject/Subtype/Image/Width 100000/Height 100000/ColorSpace/DeviceGray/BitsPerComponent 8";
    pdf(pages, b"q 595 0 0 842 0 0 cm /Im0 Do Q", Some((image, &[0u8; 16])))
}
