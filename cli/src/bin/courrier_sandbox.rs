//! `courrier-sandbox`: the PDF sandbox child alone, the same code as the hidden `courrier sandbox`
//! (`courrier_core::adapters::pdf_sandbox::child_main`), in a binary that links neither Tesseract
//! nor the server: `courrier` takes ~18 ms to start here, mostly loading libtesseract and leptonica
//! the child never uses, and a text-layer PDF costs one child start. The server runs this binary
//! when it sits next to `courrier`, else `courrier sandbox` (same arguments, same protocol).

fn main() -> std::process::ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "sandbox") {
        args.remove(0);
    }
    std::process::ExitCode::from(courrier_core::adapters::pdf_sandbox::child_main(&args))
}
