//! The performance targets, checked against the medians of a run: shown in the table
//! and the JSON as pass or fail, never asserted.

use super::mode::Mode;
use super::ops::Op;
use super::results::{case, Results};
use crate::bench::report::Row;

/// A target one mode is held to, against another measured in the same run.
#[derive(Debug, Clone, Copy)]
pub(super) enum Target {
    /// `mode`'s calls/s with `inflight` calls in flight are at least `min` × `against`'s.
    Rate {
        /// The mode held to it.
        mode: Mode,
        /// The mode it is compared with.
        against: Mode,
        /// Calls in flight.
        inflight: usize,
        /// The least ratio that passes.
        min: f64,
    },
    /// `mode`'s p50 with `inflight` in flight exceeds `against`'s by at most one thread
    /// wake-up (the condvar ping-pong's one-way p50) plus `slack_us`.
    Latency {
        /// The mode held to it.
        mode: Mode,
        /// The mode it is compared with.
        against: Mode,
        /// Calls in flight.
        inflight: usize,
        /// Microseconds allowed beyond the wake-up.
        slack_us: f64,
    },
}

/// The targets of the issue.
pub(super) const TARGETS: &[Target] = &[
    Target::Rate {
        mode: Mode::Blocking,
        against: Mode::Async,
        inflight: 64,
        min: 0.9,
    },
    Target::Rate {
        mode: Mode::Callback,
        against: Mode::Async,
        inflight: 64,
        min: 0.9,
    },
    Target::Latency {
        mode: Mode::Blocking,
        against: Mode::Async,
        inflight: 1,
        slack_us: 5.0,
    },
    // The C ABI within 5 % of blocking Rust, one call at a time and with 64 in flight.
    Target::Rate {
        mode: Mode::CAbi,
        against: Mode::Blocking,
        inflight: 1,
        min: 0.95,
    },
    Target::Rate {
        mode: Mode::CAbi,
        against: Mode::Blocking,
        inflight: 64,
        min: 0.95,
    },
];

/// One target checked for one operation.
#[derive(Debug, Clone)]
pub(super) struct Check {
    /// The mode held to it.
    pub(super) mode: Mode,
    /// Calls in flight.
    pub(super) inflight: usize,
    /// The target in words.
    pub(super) target: String,
    /// What was measured, in the target's terms.
    pub(super) got: String,
    /// Whether it meets the target.
    pub(super) pass: bool,
    /// The same as a JSON row (with its baseline, ratio, target and verdict).
    pub(super) row: Row,
}

impl Target {
    /// Checks this target for `op`; `None` when the run did not measure what it needs.
    pub(super) fn check(&self, results: &Results, op: Op) -> Option<Check> {
        match *self {
            Target::Rate {
                mode,
                against,
                inflight,
                min,
            } => {
                let rate = results.rate(op, inflight, mode)?;
                let base = results.rate(op, inflight, against)?.0;
                let ratio = rate.0 / base;
                let target = format!("calls/s >= {min:.2}x {against}");
                let pass = ratio >= min;
                let row = Row::new(&case(op, inflight), mode.name(), "ops/s", rate)
                    .against(against.name(), base)
                    .target(&format!("ratio >= {min}"), pass);
                Some(Check {
                    mode,
                    inflight,
                    target,
                    got: format!("{ratio:.2}x"),
                    pass,
                    row,
                })
            }
            Target::Latency {
                mode,
                against,
                inflight,
                slack_us,
            } => {
                let over = results.p50_over(op, inflight, mode, against)?;
                let wake = results.wakeup_us()?.0;
                let limit = wake + slack_us;
                let pass = over.0 <= limit;
                let target = format!("p50 - {against} p50 <= wake-up {wake:.1} + {slack_us} us");
                let metric = format!("p50_us_over_{against}");
                let baseline = format!("condvar-wakeup+{slack_us}us");
                let row = Row::new(&case(op, inflight), mode.name(), &metric, over)
                    .against(&baseline, limit)
                    .target("value <= baseline_value", pass);
                Some(Check {
                    mode,
                    inflight,
                    target,
                    got: format!("{:+.1} us", over.0),
                    pass,
                    row,
                })
            }
        }
    }
}
