use clap::Parser;

fn main() -> std::process::ExitCode {
    courrier_cli::run(courrier_cli::Cli::parse())
}
