/// mimalloc instead of glibc's malloc: the request path allocates a few small objects per request,
/// and glibc's allocator cost a measured share of the health route's CPU (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // Tesseract's OpenMP threads made a page several times slower on a shared machine; libgomp
    // reads OMP_THREAD_LIMIT when the library loads, before main, so the only reliable way to set
    // it is to start again with it (exec replaces this process; it returns only on failure).
    if std::env::var_os("OMP_THREAD_LIMIT").is_none()
        && let Ok(exe) = std::env::current_exe()
    {
        use std::os::unix::process::CommandExt;
        let err = std::process::Command::new(exe).args(std::env::args_os().skip(1)).env("OMP_THREAD_LIMIT", "1").exec();
        eprintln!("courrier: warning: cannot restart with OMP_THREAD_LIMIT=1: {err}");
    }
    courrier_cli::main_with_args()
}
