//! Which standbys may hold the log back: the leader truncates no further than the lowest
//! position its standbys published, but a standby that is alive and wedged (its apply loop
//! stuck while its publication task still refreshes its lease) would then hold the log, and
//! with it etcd's space, forever. So a standby whose published position, behind the snapshot
//! being truncated to, has not moved for `limit` (seen at the leader's truncation rounds) no
//! longer counts: the log is truncated past it, and should it ever move again it finds its
//! position gone and bootstraps from the leader's snapshot, as a standby that was cut off does.
//!
//! The limit must be long against a standby's publication period (a third of the election
//! TTL) and against the time a standby takes to bootstrap (its position stands still
//! meanwhile), or a healthy standby could be truncated past and have to bootstrap again.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// The leader's memory of each standby's position between truncation rounds.
#[derive(Debug)]
pub(super) struct Stalls {
    /// How long a position behind the snapshot may stand still; zero: forever.
    limit: Duration,
    /// By standby id: its position, since when it has stood there, and whether the leader
    /// said already that it stopped counting.
    seen: HashMap<String, Seen>,
}

#[derive(Debug)]
struct Seen {
    seq: u64,
    since: Instant,
    warned: bool,
}

impl Stalls {
    /// No standby seen yet; `limit` zero never stops counting one.
    pub(super) fn new(limit: Duration) -> Stalls {
        Stalls {
            limit,
            seen: HashMap::new(),
        }
    }

    /// Records the standbys' published `positions` (id, position) at `now` and returns the
    /// lowest of those that still hold back a truncation to `snapshot`; `None` when none does.
    /// A standby absent from `positions` is forgotten.
    pub(super) fn lowest(
        &mut self,
        positions: &[(String, u64)],
        snapshot: u64,
        now: Instant,
    ) -> Option<u64> {
        let present: HashSet<&str> = positions.iter().map(|(id, _)| id.as_str()).collect();
        self.seen.retain(|id, _| present.contains(id.as_str()));
        let mut lowest: Option<u64> = None;
        for (id, seq) in positions {
            let seen = self.seen.entry(id.clone()).or_insert(Seen {
                seq: *seq,
                since: now,
                warned: false,
            });
            if seen.seq != *seq {
                *seen = Seen {
                    seq: *seq,
                    since: now,
                    warned: false,
                };
            }
            let still = now.saturating_duration_since(seen.since);
            if *seq < snapshot && !self.limit.is_zero() && still >= self.limit {
                if !seen.warned {
                    seen.warned = true;
                    tracing::warn!(
                        standby = %id,
                        position = seq,
                        still_for = ?still,
                        "a standby's applied position has not moved: truncating the log past it \
                         (it bootstraps from a snapshot if it resumes)"
                    );
                }
                continue;
            }
            lowest = Some(lowest.map_or(*seq, |l| l.min(*seq)));
        }
        lowest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: Duration = Duration::from_secs(60);

    fn at(list: &[(&str, u64)]) -> Vec<(String, u64)> {
        list.iter()
            .map(|(id, seq)| (id.to_string(), *seq))
            .collect()
    }

    #[test]
    fn a_moving_standby_always_holds_the_log_back() {
        let mut stalls = Stalls::new(LIMIT);
        let t0 = Instant::now();
        for (i, seq) in [10u64, 20, 30, 40].into_iter().enumerate() {
            let now = t0 + LIMIT * i as u32;
            let got = stalls.lowest(&at(&[("a", seq), ("b", 1000)]), 500, now);
            assert_eq!(got, Some(seq));
        }
    }

    #[test]
    fn a_standby_standing_still_behind_the_snapshot_stops_counting_after_the_limit() {
        let mut stalls = Stalls::new(LIMIT);
        let t0 = Instant::now();
        let round = |wedged: u64, healthy: u64| at(&[("wedged", wedged), ("healthy", healthy)]);
        assert_eq!(stalls.lowest(&round(7, 400), 500, t0), Some(7));
        assert_eq!(stalls.lowest(&round(7, 450), 500, t0 + LIMIT / 2), Some(7));
        // The limit passed: only the healthy one counts.
        assert_eq!(stalls.lowest(&round(7, 480), 500, t0 + LIMIT), Some(480));
        assert_eq!(
            stalls.lowest(&round(7, 590), 600, t0 + LIMIT * 2),
            Some(590)
        );
        // It moves again (it bootstrapped): it counts again, with a fresh clock.
        assert_eq!(
            stalls.lowest(&round(450, 650), 700, t0 + LIMIT * 3),
            Some(450)
        );
        let later = t0 + LIMIT * 3 + LIMIT / 2;
        assert_eq!(stalls.lowest(&round(450, 700), 800, later), Some(450));
    }

    #[test]
    fn a_standby_at_or_past_the_snapshot_never_stops_counting() {
        let mut stalls = Stalls::new(LIMIT);
        let t0 = Instant::now();
        let idle = at(&[("a", 500)]);
        assert_eq!(stalls.lowest(&idle, 500, t0), Some(500));
        assert_eq!(stalls.lowest(&idle, 500, t0 + LIMIT * 10), Some(500));
    }

    #[test]
    fn a_zero_limit_keeps_every_standby_and_a_gone_one_is_forgotten() {
        let mut stalls = Stalls::new(Duration::ZERO);
        let t0 = Instant::now();
        let one = at(&[("a", 3)]);
        assert_eq!(stalls.lowest(&one, 500, t0), Some(3));
        assert_eq!(stalls.lowest(&one, 500, t0 + LIMIT * 100), Some(3));
        assert_eq!(stalls.lowest(&[], 500, t0 + LIMIT * 100), None);
        assert!(stalls.seen.is_empty());

        // Gone and back under the same id at the same position: its clock starts again.
        let mut stalls = Stalls::new(LIMIT);
        assert_eq!(stalls.lowest(&one, 500, t0), Some(3));
        assert_eq!(stalls.lowest(&[], 500, t0 + LIMIT / 2), None);
        assert_eq!(stalls.lowest(&one, 500, t0 + LIMIT), Some(3));
    }
}
