//! Which standbys may hold the log back: the leader truncates no further than the lowest
//! position its standbys published, but a standby that is alive and wedged (its apply loop
//! stuck while its publication task still refreshes its lease) would then hold the log, and
//! with it etcd's space, forever.
//!
//! So a standby whose published position was behind the snapshot at one truncation round, and
//! still there, unchanged, at a round `limit` or more later, no longer counts. The clock starts
//! only once the log has passed the position (a standby idle with an idle leader is not
//! wedged), and a standby that publishes another position counts again at once.
//!
//! While any standby is left out, the leader truncates no further than its *previous* offered
//! snapshot (see [`Truncation::upto`]): it serves that one and its newest, so a left-out standby
//! that resumes, finds its position gone and bootstraps from either offer can still tail the
//! log after it, however long its fetch takes, as long as it ends before a second newer snapshot
//! is offered.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

/// The leader's memory of each standby's position between truncation rounds.
#[derive(Debug)]
pub(super) struct Stalls {
    /// How long a position behind the snapshot may stand still; zero: forever.
    limit: Duration,
    /// By standby id.
    seen: HashMap<String, Seen>,
}

/// One standby's position as the leader last saw it.
#[derive(Debug)]
struct Seen {
    seq: u64,
    /// The first round that saw it behind the snapshot at this position.
    behind_since: Option<Instant>,
    /// Whether it is left out now (said once, when it starts, and once when it ends).
    left_out: bool,
}

impl Seen {
    /// Newly seen at `seq`: not behind yet, counting.
    fn at(seq: u64) -> Seen {
        Seen {
            seq,
            behind_since: None,
            left_out: false,
        }
    }
}

/// What one round may truncate up to, by the standbys' positions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Truncation {
    /// The lowest position of the standbys that still count, if any count.
    pub(super) lowest: Option<u64>,
    /// Whether some standby was left out this round.
    pub(super) left_out: bool,
}

impl Truncation {
    /// The sequence number to truncate up to, for the snapshot at `snapshot` when the previous
    /// offered snapshot was at `previous` (0 when there was none): min(snapshot, the lowest
    /// position that counts), and no further than `previous` while a standby is left out.
    pub(super) fn upto(&self, snapshot: u64, previous: u64) -> u64 {
        let upto = self.lowest.map_or(snapshot, |l| l.min(snapshot));
        match self.left_out {
            true => upto.min(previous),
            false => upto,
        }
    }
}

impl Stalls {
    /// No standby seen yet; `limit` zero never leaves one out.
    pub(super) fn new(limit: Duration) -> Stalls {
        Stalls {
            limit,
            seen: HashMap::new(),
        }
    }

    /// Records the standbys' published `positions` (id, position) at a round that truncates
    /// to the snapshot at `snapshot`, at `now`, and says which still hold the log back. A
    /// standby absent from `positions` is forgotten.
    pub(super) fn round(
        &mut self,
        positions: &[(String, u64)],
        snapshot: u64,
        now: Instant,
    ) -> Truncation {
        let present: HashSet<&str> = positions.iter().map(|(id, _)| id.as_str()).collect();
        self.seen.retain(|id, _| present.contains(id.as_str()));
        let mut out = Truncation {
            lowest: None,
            left_out: false,
        };
        for (id, seq) in positions {
            let seen = self
                .seen
                .entry(id.clone())
                .or_insert_with(|| Seen::at(*seq));
            if seen.seq != *seq {
                if seen.left_out {
                    tracing::info!(
                        standby = %id,
                        position = seq,
                        "a standby's applied position moved again: it holds the log back again"
                    );
                }
                *seen = Seen::at(*seq);
            }
            if *seq < snapshot && seen.behind_since.is_none() {
                seen.behind_since = Some(now);
            }
            let still = seen
                .behind_since
                .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
            if !self.limit.is_zero() && *seq < snapshot && still >= self.limit {
                if !seen.left_out {
                    seen.left_out = true;
                    tracing::warn!(
                        standby = %id,
                        position = seq,
                        still_for = ?still,
                        "a standby's applied position has not moved: the log is truncated past \
                         it (should it resume, it bootstraps from a snapshot)"
                    );
                }
                out.left_out = true;
                continue;
            }
            out.lowest = Some(out.lowest.map_or(*seq, |l| l.min(*seq)));
        }
        out
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

    fn counting(lowest: u64) -> Truncation {
        Truncation {
            lowest: Some(lowest),
            left_out: false,
        }
    }

    fn leaving_out(lowest: Option<u64>) -> Truncation {
        Truncation {
            lowest,
            left_out: true,
        }
    }

    #[test]
    fn a_moving_standby_always_holds_the_log_back() {
        let mut stalls = Stalls::new(LIMIT);
        let t0 = Instant::now();
        for (i, seq) in [10u64, 20, 30, 40].into_iter().enumerate() {
            let now = t0 + LIMIT * i as u32;
            let got = stalls.round(&at(&[("a", seq), ("b", 1000)]), 500, now);
            assert_eq!(got, counting(seq));
        }
    }

    #[test]
    fn a_standby_standing_still_behind_the_snapshot_is_left_out_after_the_limit() {
        let mut stalls = Stalls::new(LIMIT);
        let t0 = Instant::now();
        let round = |wedged: u64, healthy: u64| at(&[("wedged", wedged), ("healthy", healthy)]);
        assert_eq!(stalls.round(&round(7, 400), 500, t0), counting(7));
        assert_eq!(
            stalls.round(&round(7, 450), 500, t0 + LIMIT / 2),
            counting(7)
        );
        // The limit passed: only the healthy one counts.
        assert_eq!(
            stalls.round(&round(7, 480), 500, t0 + LIMIT),
            leaving_out(Some(480))
        );
        assert_eq!(
            stalls.round(&round(7, 590), 600, t0 + LIMIT * 2),
            leaving_out(Some(590))
        );
        // It moves again (it bootstrapped): it counts again, with a fresh clock.
        let t3 = t0 + LIMIT * 3;
        assert_eq!(stalls.round(&round(450, 650), 700, t3), counting(450));
        let later = t3 + LIMIT / 2;
        assert_eq!(stalls.round(&round(450, 700), 800, later), counting(450));
    }

    #[test]
    fn the_clock_starts_once_the_log_has_passed_the_position() {
        let mut stalls = Stalls::new(LIMIT);
        let t0 = Instant::now();
        let idle = at(&[("a", 500)]);
        // Caught up with the snapshot for a long time: never left out.
        assert_eq!(stalls.round(&idle, 500, t0), counting(500));
        assert_eq!(stalls.round(&idle, 500, t0 + LIMIT * 10), counting(500));
        // Then the leader writes after a long quiet spell, before the standby published
        // again: behind now, but only from now.
        assert_eq!(stalls.round(&idle, 600, t0 + LIMIT * 20), counting(500));
        let t1 = t0 + LIMIT * 20 + LIMIT / 2;
        assert_eq!(stalls.round(&idle, 700, t1), counting(500));
        assert_eq!(stalls.round(&idle, 800, t0 + LIMIT * 21), leaving_out(None));
    }

    #[test]
    fn a_zero_limit_keeps_every_standby_and_a_gone_one_is_forgotten() {
        let mut stalls = Stalls::new(Duration::ZERO);
        let t0 = Instant::now();
        let one = at(&[("a", 3)]);
        assert_eq!(stalls.round(&one, 500, t0), counting(3));
        assert_eq!(stalls.round(&one, 500, t0 + LIMIT * 100), counting(3));
        let none = Truncation {
            lowest: None,
            left_out: false,
        };
        assert_eq!(stalls.round(&[], 500, t0 + LIMIT * 100), none);
        assert!(stalls.seen.is_empty());

        // Gone and back under the same id at the same position: its clock starts again.
        let mut stalls = Stalls::new(LIMIT);
        assert_eq!(stalls.round(&one, 500, t0), counting(3));
        assert_eq!(stalls.round(&[], 500, t0 + LIMIT / 2), none);
        assert_eq!(stalls.round(&one, 500, t0 + LIMIT), counting(3));
    }

    #[test]
    fn while_a_standby_is_left_out_truncation_stops_at_the_previous_snapshot() {
        // Only counting standbys: min(snapshot, lowest).
        assert_eq!(counting(450).upto(500, 400), 450);
        assert_eq!(counting(900).upto(500, 400), 500);
        let no_standby = Truncation {
            lowest: None,
            left_out: false,
        };
        assert_eq!(no_standby.upto(500, 400), 500);
        // One left out: no further than the previous offer, which the leader still serves.
        assert_eq!(leaving_out(Some(900)).upto(500, 400), 400);
        assert_eq!(leaving_out(None).upto(500, 400), 400);
        assert_eq!(leaving_out(Some(300)).upto(500, 400), 300);
        assert_eq!(leaving_out(None).upto(500, 0), 0);
    }
}
