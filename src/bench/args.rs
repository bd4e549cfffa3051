//! The flags every `yuebing bench …` takes, and how benches read sizes and lists.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use yuebing_rpc::{Size, SizeError};

use crate::cli::CliError;
use crate::config::{ConfigError, ConfigFile};

/// Settings every benchmark takes.
#[derive(Args, Debug)]
pub struct BenchCommon {
    /// Repetitions of every measurement [default: 3; config: bench.repeat].
    #[arg(long, env = "YUEBING_BENCH_REPEAT")]
    pub repeat: Option<u32>,
    /// Measured milliseconds per measurement [default: 1000; config: bench.duration_ms].
    #[arg(long, env = "YUEBING_BENCH_DURATION_MS")]
    pub duration_ms: Option<u64>,
    /// Warm-up milliseconds before each measurement [default: 200; config: bench.warmup_ms].
    #[arg(long, env = "YUEBING_BENCH_WARMUP_MS")]
    pub warmup_ms: Option<u64>,
    /// Also write the results as JSON to this file.
    #[arg(long, env = "YUEBING_BENCH_JSON")]
    pub json: Option<PathBuf>,
}

impl BenchCommon {
    /// (repeat, duration, warm-up), resolved against the config file.
    pub fn resolve(&self, file: &ConfigFile) -> Result<(u32, Duration, Duration), ConfigError> {
        Ok((
            file.resolve("bench", "repeat", self.repeat, 3)?.max(1),
            Duration::from_millis(file.resolve("bench", "duration_ms", self.duration_ms, 1000)?),
            Duration::from_millis(file.resolve("bench", "warmup_ms", self.warmup_ms, 200)?),
        ))
    }
}

/// A size a bench measures or runs with (a value, a block, store space): [`Size`]'s syntax
/// (`4K`, `16MiB`, `1G`), at least one byte, as a `usize`.
pub fn positive_size(text: &str) -> Result<usize, String> {
    text.parse::<Size>()
        .and_then(Size::positive)
        .and_then(Size::to_usize)
        .map_err(|e| match e {
            SizeError::Zero => format!("{:?}: {e}", text.trim()),
            e => e.to_string(),
        })
}

/// The comma-separated items of `text`, each trimmed and parsed by `parse` (a usage error
/// for the first that fails).
pub fn list<T>(text: &str, parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, CliError> {
    text.split(',')
        .map(|p| parse(p.trim()))
        .collect::<Result<Vec<T>, String>>()
        .map_err(CliError::Usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_sizes_are_positive_sizes() {
        assert_eq!(positive_size("4K").unwrap(), 4096);
        assert_eq!(positive_size(" 64KiB ").unwrap(), 65536);
        assert_eq!(positive_size("1m").unwrap(), 1 << 20);
        assert_eq!(positive_size("512").unwrap(), 512);
        assert_eq!(positive_size("1T").unwrap(), 1 << 40);
        for bad in ["0", "0K", "x", "", "1.5M", "16777216T"] {
            assert!(positive_size(bad).is_err(), "{bad:?}");
        }
    }
}
