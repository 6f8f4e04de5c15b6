use clap::Parser;

/// mimalloc instead of glibc's malloc: the request path allocates a few small objects per request,
/// and glibc's allocator cost a measured share of the health route's CPU (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    courrier_cli::run(courrier_cli::Cli::parse())
}
