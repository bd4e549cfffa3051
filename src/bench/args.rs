//! The flags every `yuebing bench …` takes.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

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
