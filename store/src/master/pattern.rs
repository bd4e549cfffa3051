//! [`KeyPattern`]: the regular expression of `remove_by_regex`, bounded so that a caller's
//! pattern cannot make the master (which matches it under its one lock) build a huge automaton.

use crate::error::{Error, Result};

/// The longest pattern taken, in bytes.
pub const MAX_PATTERN_LEN: usize = 4096;
/// The most memory the compiled pattern may take, in bytes.
const MAX_COMPILED: usize = 1 << 20;

/// A regular expression over keys, in the `regex` crate's syntax (Perl-like, as ECMAScript's
/// for the usual cases; no look-around or back-references), matched anywhere in a key as
/// Mooncake's `std::regex_search` does: anchor with `^…$` to match whole keys.
#[derive(Debug, Clone)]
pub struct KeyPattern(regex::Regex);

impl KeyPattern {
    /// Compiles `pattern`. `InvalidParams` if it is empty, longer than [`MAX_PATTERN_LEN`],
    /// malformed, or compiles to more than a bounded size.
    pub fn new(pattern: &str) -> Result<KeyPattern> {
        if pattern.is_empty() {
            return Err(Error::params("empty key pattern"));
        }
        if pattern.len() > MAX_PATTERN_LEN {
            return Err(Error::params(format!(
                "key pattern of {} bytes is longer than {MAX_PATTERN_LEN}",
                pattern.len()
            )));
        }
        regex::RegexBuilder::new(pattern)
            .size_limit(MAX_COMPILED)
            .dfa_size_limit(MAX_COMPILED)
            .build()
            .map(KeyPattern)
            .map_err(|e| Error::params(format!("bad key pattern: {e}")))
    }

    /// Whether the pattern matches somewhere in `key`.
    pub fn matches(&self, key: &str) -> bool {
        self.0.is_match(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_anywhere_unless_anchored() {
        let p = KeyPattern::new("b[0-9]").unwrap();
        assert!(p.matches("b1") && p.matches("xb2y") && !p.matches("b"));
        let whole = KeyPattern::new("^b[0-9]$").unwrap();
        assert!(whole.matches("b1") && !whole.matches("xb2y"));
    }

    #[test]
    fn bad_long_empty_and_huge_patterns_are_invalid_params() {
        let huge = r"\w{1000}\w{1000}".to_string();
        for bad in ["(", "", &"a".repeat(MAX_PATTERN_LEN + 1), &huge] {
            let e = KeyPattern::new(bad).unwrap_err();
            assert_eq!(e.code(), -600, "{bad:.20}: {e}");
        }
    }
}
