//! [`CliError`]: why a `yuebing` command failed, printed as one line with a name and a code.

use crate::config::ConfigError;

/// Why a command failed: `main` prints it as one line, `error[NAME CODE]: message`, and exits
/// with [`CliError::exit_code`].
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// A setting is malformed (flag, `YUEBING_*` variable or config file). Remedy: the message
    /// names the setting and what it takes.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A benchmark could not run to its end (a process it started failed, a call failed).
    #[error("{0}")]
    Bench(String),
    /// An argument is malformed (an unknown transport, a size of zero). Remedy: as the message
    /// says.
    #[error("{0}")]
    Usage(String),
    /// The demo failed: its objects could not be put, read back or checked.
    #[error("{0}")]
    Demo(String),
    /// An output file (`--json`) could not be written.
    #[error("cannot write {path}: {reason}")]
    Output {
        /// The file.
        path: String,
        /// Why.
        reason: String,
    },
    /// A store call failed; its own name and code are printed.
    #[error(transparent)]
    Store(#[from] yuebing_store::Error),
    /// Something that should not fail did (a thread could not start, a task was cancelled).
    #[error("{0}")]
    Internal(String),
}

impl CliError {
    /// The name printed with the error: a store error's is its code's, the same name the C ABI
    /// and the Python package give (from the crates' tables, `yuebing::bridge::error`).
    pub fn name(&self) -> &'static str {
        match self {
            CliError::Config(_) => "ConfigError",
            CliError::Bench(_) => "BenchFailed",
            CliError::Usage(_) => "UsageError",
            CliError::Demo(_) => "DemoFailed",
            CliError::Output { .. } => "OutputError",
            CliError::Store(e) => crate::bridge::error::code_name(e.code()),
            CliError::Internal(_) => "InternalError",
        }
    }

    /// The numeric code printed with the name: the error's own code where it has one.
    pub fn code(&self) -> i32 {
        match self {
            CliError::Store(e) => e.code(),
            e => i32::from(e.exit_code()),
        }
    }

    /// The process's exit status: 2 for a malformed setting or argument, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Config(_) | CliError::Usage(_) => 2,
            _ => 1,
        }
    }
}
