//! The CLI's error, and the one mapping from error kind to exit code.

use crate::config::ConfigError;
use courrier_core::kernel::{Code, CoreError, ErrorKind};
use courrier_core::storage::StoreError;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot prepare the data directory {path}: {source}")]
    DataDir { path: String, source: std::io::Error },
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: String, source: std::io::Error },
    #[error("the server failed: {0}")]
    Serve(std::io::Error),
    #[error(transparent)]
    Access(#[from] courrier_core::access::AccessError),
    #[error(transparent)]
    Name(#[from] courrier_core::kernel::NameError),
    /// A value refused by the parsing the CLI shares with the HTTP API.
    #[error("{message}")]
    Input { code: Code, message: String },
    #[error("cannot read the password from standard input: {0}")]
    Stdin(std::io::Error),
    #[error(transparent)]
    Mailing(#[from] courrier_core::mailing::MailingError),
    #[error("cannot open {path}: {source}")]
    File { path: String, source: std::io::Error },
    #[error("cannot write the output: {0}")]
    Output(std::io::Error),
    #[error(transparent)]
    Document(#[from] courrier_core::ocr::documents::DocumentError),
    #[error(transparent)]
    Usage(#[from] courrier_core::ocr::usage::UsageError),
    #[error(transparent)]
    Page(#[from] courrier_core::kernel::PageError),
    #[error(transparent)]
    StoreCopy(#[from] courrier_store_postgres::store_copy::StoreCopyError),
}

impl CoreError for CliError {
    fn code(&self) -> Code {
        match self {
            CliError::Config(e) => e.code(),
            CliError::Store(e) => e.code(),
            CliError::DataDir { .. } | CliError::Bind { .. } => Code::StorageUnavailable,
            CliError::Serve(_) => Code::Internal,
            CliError::Access(e) => e.code(),
            CliError::Name(e) => e.code(),
            CliError::Input { code, .. } => *code,
            CliError::Stdin(_) | CliError::File { .. } => Code::ValidationFailed,
            CliError::Mailing(e) => e.code(),
            CliError::Output(_) => Code::Internal,
            CliError::Document(e) => e.code(),
            CliError::Usage(e) => e.code(),
            CliError::Page(e) => e.code(),
            CliError::StoreCopy(e) => e.code(),
        }
    }
}

/// The one mapping from error kind to process exit code. No `_` arm: a new kind must be decided
/// here. 1 is "the request cannot succeed as asked" (what `decisions.md` asks of a key wider than
/// its user); 2 stays clap's usage error; 69 and 70 are sysexits' EX_UNAVAILABLE and EX_SOFTWARE.
pub fn exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::Malformed => 1,
        ErrorKind::Invalid => 1,
        ErrorKind::TooLarge => 1,
        ErrorKind::Unauthenticated => 1,
        ErrorKind::Forbidden => 1,
        ErrorKind::MethodNotAllowed => 1,
        ErrorKind::NotFound => 3,
        ErrorKind::Conflict => 4,
        ErrorKind::RateLimited => 5,
        ErrorKind::Unavailable => 69,
        ErrorKind::Internal => 70,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_error_exits_zero_or_two() {
        for code in Code::ALL {
            let exit = exit_code(code.kind());
            assert!(exit != 0 && exit != 2, "{} -> {exit}", code.as_str());
        }
    }
}
