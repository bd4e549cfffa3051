//! Durations given on the command line (`store stats --watch 500ms`), with one parser: a
//! number of seconds (`2`, `1.5`, `2s`) or of milliseconds (`500ms`).

use std::time::Duration;

/// The shortest duration accepted: a shorter one is a typo more likely than a wish.
const MIN: Duration = Duration::from_millis(1);
/// The longest: a day (deadlines are computed from it, and must not overflow an `Instant`).
const MAX: Duration = Duration::from_secs(86_400);

/// Parses `2`, `2s`, `1.5s` (seconds) or `500ms` (milliseconds), spaces allowed before the
/// unit. Zero, negatives, less than a millisecond, other units and non-numbers are refused
/// with a message that says what is accepted.
pub fn duration(text: &str) -> Result<Duration, String> {
    let bad = |why: &str| {
        format!("{text:?} is not a duration: {why} (a number of seconds, 2 or 1.5s, or of milliseconds, 500ms)")
    };
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| c.is_ascii_alphabetic())
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let scale = match unit {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        other => return Err(bad(&format!("unknown unit {other:?}"))),
    };
    let value: f64 = number.trim().parse().map_err(|_| bad("not a number"))?;
    if !value.is_finite() || value <= 0.0 {
        return Err(bad("it must be positive"));
    }
    let d = Duration::try_from_secs_f64(value * scale).map_err(|_| bad("too long"))?;
    if d < MIN {
        return Err(bad("at least 1ms"));
    }
    if d > MAX {
        return Err(bad("at most a day, 86400"));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_and_milliseconds_parse_and_nonsense_is_refused() {
        let ms = Duration::from_millis;
        assert_eq!(duration("2"), Ok(ms(2000)));
        assert_eq!(duration("2s"), Ok(ms(2000)));
        assert_eq!(duration("1.5"), Ok(ms(1500)));
        assert_eq!(duration(" 500ms"), Ok(ms(500)));
        assert_eq!(duration("250 ms"), Ok(ms(250)));
        assert_eq!(duration("0.001"), Ok(ms(1)));
        for bad in [
            "",
            "0",
            "0ms",
            "-1",
            "1m",
            "1h",
            "ms",
            "fast",
            "NaN",
            "inf",
            "0.5ms",
            "1e30",
            "86401",
            "10000000000000000000",
        ] {
            let e = duration(bad).unwrap_err();
            assert!(e.contains("500ms"), "{bad:?}: {e}");
        }
    }
}
