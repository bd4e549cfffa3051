//! Byte sizes as people write them (`4096`, `64K`, `16MiB`, `2G`, `1T`): one [`Size`] type,
//! parsed and printed the same way by every part of yuebing that takes a size as text — the
//! command line (`--store-size`, `bench --blocks`, `--sizes`, …), the config file and
//! Python's `Store(staging_size="64MiB")`.
//!
//! # Syntax
//! Surrounding whitespace is ignored. A size is an unsigned decimal integer (digits, an
//! optional leading `+`; no fraction, sign or separator), then optional whitespace, then an
//! optional unit, in any case:
//!
//! | unit | bytes |
//! |---|---|
//! | none, `B` | 1 |
//! | `K`, `Ki`, `KB`, `KiB` | 1024 (2¹⁰) |
//! | `M`, `Mi`, `MB`, `MiB` | 2²⁰ |
//! | `G`, `Gi`, `GB`, `GiB` | 2³⁰ |
//! | `T`, `Ti`, `TB`, `TiB` | 2⁴⁰ |
//!
//! Every unit is binary: `K` and `KB` mean 1024, not 1000, as in every size parser yuebing had
//! before this one and in Mooncake's configuration. Zero is a size; a caller that needs a
//! positive one asks [`Size::positive`]. A value above `u64::MAX` bytes is
//! [`SizeError::Overflow`], and so is arithmetic that would leave `u64` ([`Size::checked_add`],
//! [`Size::checked_mul`], [`Size::checked_sub`]): nothing here panics.
//!
//! [`Size`]'s `Display` writes the largest unit that divides the size exactly (`0B`, `100B`,
//! `4KiB`, `1GiB`), which parses back to the same size.
//!
//! ```
//! use yuebing_rpc::Size;
//!
//! let staging: Size = "64MiB".parse()?;
//! assert_eq!(staging.bytes(), 64 << 20);
//! assert_eq!("64 m".parse::<Size>()?, staging);
//! assert_eq!(staging.to_string(), "64MiB");
//! assert!("1.5G".parse::<Size>().is_err());
//! assert!("16777216T".parse::<Size>().is_err()); // 2⁶⁴ bytes
//! # Ok::<(), yuebing_rpc::SizeError>(())
//! ```

use std::fmt;
use std::str::FromStr;

/// A number of bytes, written with an optional binary unit (the [module](self) gives the
/// syntax).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Size(u64);

/// Why a text is not a [`Size`], or why arithmetic on sizes failed. Each caller reports it as
/// its own invalid-argument error (the command line's `ConfigError` or `UsageError`, Python's
/// `InvalidArgument`), naming the setting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    /// The text is empty or only whitespace. Remedy: give a size such as `64MiB`.
    #[error("no size given (expected e.g. 4096, 64K, 16MiB, 2G, 1T)")]
    Empty,
    /// The text does not start with a decimal integer (a fraction such as `1.5G`, a negative
    /// number, a word). Remedy: a whole number of bytes or of a unit, e.g. `1536M`.
    #[error("{text:?} is not a size (expected a whole number and a unit, e.g. 4096, 64K, 16MiB)")]
    Invalid {
        /// The text given.
        text: String,
    },
    /// The number is followed by something that is not a unit. Remedy: one of `B`, `K`,
    /// `KiB`, `KB`, `M`…, `G`…, `T`… (in any case).
    #[error(
        "{text:?}: unknown unit {unit:?} (units: B, K/Ki/KB/KiB, M…, G…, T…, all powers of 1024)"
    )]
    UnknownUnit {
        /// The text given.
        text: String,
        /// What follows the number.
        unit: String,
    },
    /// The size, or the result of arithmetic on sizes, does not fit in 64 bits (or, for
    /// [`Size::to_usize`], in this machine's `usize`). Remedy: a smaller size.
    #[error("{what}: out of range (at most {} bytes)", u64::MAX)]
    Overflow {
        /// The text or the operation.
        what: String,
    },
    /// A size of zero where a positive one is needed ([`Size::positive`]). Remedy: give at
    /// least one byte.
    #[error("a size of 0: must be at least 1 byte")]
    Zero,
}

/// The units and their powers of two, by their lower-case spellings.
fn unit_shift(unit: &str) -> Option<u32> {
    Some(match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "ki" | "kb" | "kib" => 10,
        "m" | "mi" | "mb" | "mib" => 20,
        "g" | "gi" | "gb" | "gib" => 30,
        "t" | "ti" | "tb" | "tib" => 40,
        _ => return None,
    })
}

impl Size {
    /// No bytes.
    pub const ZERO: Size = Size(0);

    /// A size of `bytes` bytes.
    pub const fn new(bytes: u64) -> Size {
        Size(bytes)
    }

    /// The number of bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }

    /// The number of bytes as a `usize`.
    ///
    /// # Errors
    /// [`SizeError::Overflow`] where `usize` is narrower than the size (a 32-bit target).
    pub fn to_usize(self) -> Result<usize, SizeError> {
        usize::try_from(self.0).map_err(|_| SizeError::Overflow {
            what: format!("{self} in this machine's usize"),
        })
    }

    /// This size if it is at least one byte.
    ///
    /// # Errors
    /// [`SizeError::Zero`] for zero.
    pub fn positive(self) -> Result<Size, SizeError> {
        match self.0 {
            0 => Err(SizeError::Zero),
            _ => Ok(self),
        }
    }

    /// `self + other`.
    ///
    /// # Errors
    /// [`SizeError::Overflow`] above `u64::MAX` bytes.
    pub fn checked_add(self, other: Size) -> Result<Size, SizeError> {
        self.0
            .checked_add(other.0)
            .map(Size)
            .ok_or_else(|| overflow(format_args!("{self} + {other}")))
    }

    /// `self - other`.
    ///
    /// # Errors
    /// [`SizeError::Overflow`] below zero.
    pub fn checked_sub(self, other: Size) -> Result<Size, SizeError> {
        self.0
            .checked_sub(other.0)
            .map(Size)
            .ok_or_else(|| overflow(format_args!("{self} - {other}")))
    }

    /// `self × n`.
    ///
    /// # Errors
    /// [`SizeError::Overflow`] above `u64::MAX` bytes.
    pub fn checked_mul(self, n: u64) -> Result<Size, SizeError> {
        self.0
            .checked_mul(n)
            .map(Size)
            .ok_or_else(|| overflow(format_args!("{self} × {n}")))
    }
}

fn overflow(what: fmt::Arguments<'_>) -> SizeError {
    SizeError::Overflow {
        what: what.to_string(),
    }
}

impl FromStr for Size {
    type Err = SizeError;

    fn from_str(text: &str) -> Result<Size, SizeError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(SizeError::Empty);
        }
        let unsigned = trimmed.strip_prefix('+').unwrap_or(trimmed);
        let digits = unsigned
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(unsigned.len());
        let (number, unit) = unsigned.split_at(digits);
        if number.is_empty() {
            return Err(SizeError::Invalid { text: text.into() });
        }
        let unit = unit.trim_start();
        let shift = unit_shift(unit).ok_or_else(|| match unit.starts_with(['.', ',', '_']) {
            // `1.5G`, `1,024`, `1_000`: a number yuebing does not read, not a unit.
            true => SizeError::Invalid { text: text.into() },
            false => SizeError::UnknownUnit {
                text: text.into(),
                unit: unit.into(),
            },
        })?;
        let out_of_range = || SizeError::Overflow {
            what: format!("{text:?}"),
        };
        // Only digits are left, so the one way this parse fails is a number above u64::MAX.
        let n: u64 = number.parse().map_err(|_| out_of_range())?;
        n.checked_mul(1 << shift).map(Size).ok_or_else(out_of_range)
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u32, &str); 4] = [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")];
        let n = self.0;
        match UNITS
            .iter()
            .find(|&&(shift, _)| n != 0 && n.trailing_zeros() >= shift)
        {
            Some(&(shift, unit)) => write!(f, "{}{unit}", n >> shift),
            None => write!(f, "{n}B"),
        }
    }
}

impl From<u64> for Size {
    fn from(bytes: u64) -> Size {
        Size(bytes)
    }
}

impl From<Size> for u64 {
    fn from(size: Size) -> u64 {
        size.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<u64, SizeError> {
        text.parse::<Size>().map(Size::bytes)
    }

    #[test]
    fn plain_numbers_and_every_unit_in_any_case_parse() {
        assert_eq!(parse("0").unwrap(), 0);
        assert_eq!(parse("512").unwrap(), 512);
        assert_eq!(parse("+512").unwrap(), 512);
        assert_eq!(parse("512B").unwrap(), 512);
        let units = [("K", 10), ("M", 20), ("G", 30), ("T", 40)];
        for (letter, shift) in units {
            for suffix in ["", "i", "B", "iB"] {
                let unit = format!("{letter}{suffix}");
                for spelled in [unit.clone(), unit.to_lowercase(), unit.to_uppercase()] {
                    assert_eq!(
                        parse(&format!("3{spelled}")).unwrap(),
                        3 << shift,
                        "{spelled}"
                    );
                }
            }
        }
        assert_eq!(parse("64KiB").unwrap(), 65536);
        assert_eq!(parse("1T").unwrap(), 1 << 40);
    }

    /// What each parser before this one accepted parses to the same number: the command
    /// line's (`4K`, `64KiB`, `1m`, `16MIB`, `2GB`) and Python's (`512k`, `2G`, `1t`, `4ki`,
    /// `64 MiB`).
    #[test]
    fn earlier_accepted_spellings_keep_their_values() {
        let cases = [
            ("4K", 4 << 10),
            ("64KiB", 64 << 10),
            ("1m", 1 << 20),
            ("16MIB", 16 << 20),
            ("2GB", 2 << 30),
            ("512k", 512 << 10),
            ("1t", 1 << 40),
            ("4ki", 4 << 10),
            ("64 MiB", 64 << 20),
            ("100b", 100),
        ];
        for (text, want) in cases {
            assert_eq!(parse(text).unwrap(), want, "{text}");
        }
    }

    #[test]
    fn whitespace_around_and_between_is_ignored() {
        assert_eq!(parse("  16MiB\t").unwrap(), 16 << 20);
        assert_eq!(parse("16 \t MiB").unwrap(), 16 << 20);
        assert_eq!(parse("\n7\n").unwrap(), 7);
    }

    #[test]
    fn nonsense_is_refused_by_kind() {
        for empty in ["", "   ", "\t"] {
            assert_eq!(parse(empty), Err(SizeError::Empty), "{empty:?}");
        }
        for invalid in [
            "K", "MiB", "x", "-1", "-1K", "1.5G", "1,024", "1_000", "+", "++1",
        ] {
            assert!(
                matches!(parse(invalid), Err(SizeError::Invalid { .. })),
                "{invalid:?}: {:?}",
                parse(invalid)
            );
        }
        // Stray or doubled suffixes, some of which an earlier parser let through as bytes.
        for unit in [
            "4i", "4iB", "4KBB", "4MiBiB", "4P", "4KiBs", "4 K B", "4 bytes", "1e3", "0x10",
        ] {
            assert!(
                matches!(parse(unit), Err(SizeError::UnknownUnit { .. })),
                "{unit:?}: {:?}",
                parse(unit)
            );
        }
        let e = parse("4 zonks").unwrap_err();
        assert!(e.to_string().contains("\"zonks\""), "{e}");
    }

    #[test]
    fn values_above_64_bits_are_overflow_errors() {
        assert_eq!(parse(&u64::MAX.to_string()).unwrap(), u64::MAX);
        assert_eq!(parse("16777215T").unwrap(), 16_777_215 << 40);
        for big in [
            "16777216T",
            "18446744073709551616",
            "99999999999999999999999K",
        ] {
            assert!(
                matches!(parse(big), Err(SizeError::Overflow { .. })),
                "{big}: {:?}",
                parse(big)
            );
        }
    }

    #[test]
    fn arithmetic_is_checked() {
        let (one, max) = (Size::new(1), Size::new(u64::MAX));
        assert_eq!(Size::new(2).checked_add(one), Ok(Size::new(3)));
        assert!(matches!(
            max.checked_add(one),
            Err(SizeError::Overflow { .. })
        ));
        assert_eq!(Size::new(2).checked_sub(one), Ok(one));
        assert!(matches!(
            one.checked_sub(Size::new(2)),
            Err(SizeError::Overflow { .. })
        ));
        assert_eq!(Size::new(3).checked_mul(4), Ok(Size::new(12)));
        assert!(matches!(
            max.checked_mul(2),
            Err(SizeError::Overflow { .. })
        ));
        assert_eq!(Size::ZERO.positive(), Err(SizeError::Zero));
        assert_eq!(one.positive(), Ok(one));
        assert_eq!(Size::new(4096).to_usize(), Ok(4096));
    }

    #[test]
    fn display_uses_the_largest_exact_unit_and_parses_back() {
        let cases = [
            (0, "0B"),
            (100, "100B"),
            (1536, "1536B"),
            (4096, "4KiB"),
            (1 << 20, "1MiB"),
            (3 << 29, "1536MiB"),
            (1 << 30, "1GiB"),
            (5 << 40, "5TiB"),
            (u64::MAX, "18446744073709551615B"),
        ];
        for (bytes, text) in cases {
            assert_eq!(Size::new(bytes).to_string(), text);
            assert_eq!(text.parse::<Size>(), Ok(Size::new(bytes)));
        }
    }
}
