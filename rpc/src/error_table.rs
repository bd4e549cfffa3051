//! One table of error codes per crate, in the manner of quinn-proto's `transport_error.rs`: the
//! [`error_table!`](crate::error_table) macro declares a crate's error enum with one row per
//! error (its fields, code, name, retryability and message), and generates from those rows the
//! table ([`ErrorCode`]s) that every other layer (the C ABI's names and constants, the Python
//! package's classes, the Mooncake package's codes) is built from or checked against.

use std::ffi::CStr;

/// One row of a crate's error table: a stable code, the one name it goes by everywhere (in
/// Rust, in the C ABI, in Python, on the command line), and whether retrying can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ErrorCode {
    /// The stable numeric code.
    pub code: i32,
    /// Its name ("ObjectNotFound").
    pub name: &'static str,
    /// The same name as a C string (for the C ABI's `yuebing_error_name`).
    pub c_name: &'static CStr,
    /// Whether trying again (after a back-off) can succeed.
    pub retryable: bool,
}

impl ErrorCode {
    /// A row; `name_nul` is `name` followed by a NUL (the macro writes both).
    #[doc(hidden)]
    pub const fn new(
        code: i32,
        name: &'static str,
        name_nul: &'static str,
        retryable: bool,
    ) -> Self {
        let c_name = match CStr::from_bytes_with_nul(name_nul.as_bytes()) {
            Ok(c) => c,
            Err(_) => panic!("an error name holds a NUL"),
        };
        ErrorCode {
            code,
            name,
            c_name,
            retryable,
        }
    }

    /// The row of `code` in `table`, if it has one.
    pub fn find(table: &'static [ErrorCode], code: i32) -> Option<&'static ErrorCode> {
        table.iter().find(|row| row.code == code)
    }

    /// Whether `table` is one crate's table as every layer expects it: each code in `codes`
    /// (the crate's block) and each code and each name on one row only, the C name spelling
    /// the same name. Each crate's tests check its own table with it.
    pub fn check_table(
        table: &[ErrorCode],
        codes: std::ops::RangeInclusive<i32>,
    ) -> Result<(), String> {
        for (i, row) in table.iter().enumerate() {
            if !codes.contains(&row.code) {
                return Err(format!("{row:?}: code outside {codes:?}"));
            }
            if row.c_name.to_str() != Ok(row.name) {
                return Err(format!("{row:?}: the C name spells another name"));
            }
            if let Some(twin) = table[..i]
                .iter()
                .find(|t| t.code == row.code || t.name == row.name)
            {
                return Err(format!("{row:?} and {twin:?} share a code or a name"));
            }
        }
        Ok(())
    }
}

/// Declares a crate's error enum and its table of codes.
///
/// Each own error is one row: its doc comment (cause and remedy), the variant and its fields,
/// `= code, "Name", retryable: bool, "message"` (the message is thiserror's `#[error(..)]`, with
/// its format arguments), and optionally `=> wire |w| expr`: how the variant is rebuilt from the
/// crate's wire form (the type after `wire:`), an `Option` (`None`: the wire form does not
/// rebuild it). Variants that wrap another error, or carry a code that is not their own, follow
/// in `wrapped { .. }`, each with the match arm that gives its code, name and retryability.
/// Codes that a crate reports but no variant carries (the C ABI's boundary errors) are rows of
/// `codes_only { .. }`.
///
/// It generates, in an `impl` of the enum:
/// - `CODES`: the table, one [`ErrorCode`] per own row, then per `codes_only` row;
/// - `code()`, `name()`, `is_retryable()`: from the row, or from the `wrapped` arm;
/// - `own_code_row(code)`: the row of a code of this table;
/// - `decode_wire(code, &wire)` (private): `None` where no row of `code` says how to rebuild
///   it, else what its `wire` expression gave.
///
/// ```
/// yuebing_rpc::error_table! {
///     wire: String;
///     /// What can go wrong.
///     #[derive(Debug, thiserror::Error)]
///     pub enum Error {
///         /// The key is missing. Remedy: put it first.
///         NotFound {
///             /// The key.
///             key: String,
///         } = -704, "ObjectNotFound", retryable: false, "object {key:?} not found"
///             => wire |w| Some(Error::NotFound { key: w.clone() });
///     }
///     wrapped {
///         /// The rpc layer failed; its code is kept.
///         #[error(transparent)]
///         Rpc(yuebing_rpc::Error) => Error::Rpc(e) => e.code(), e.name(), e.is_retryable();
///     }
/// }
/// assert_eq!(Error::CODES[0].name, "ObjectNotFound");
/// assert_eq!(Error::NotFound { key: "k".into() }.code(), -704);
/// ```
#[macro_export]
macro_rules! error_table {
    (
        $(#[$meta:meta])*
        $vis:vis enum $Error:ident $rows:tt
        $($rest:tt)*
    ) => {
        $crate::error_table! { wire: (); $(#[$meta])* $vis enum $Error $rows $($rest)* }
    };
    (
        wire: $Wire:ty;
        $(#[$meta:meta])*
        $vis:vis enum $Error:ident {
            $(
                $(#[$vmeta:meta])*
                $Variant:ident $({ $( $(#[$fmeta:meta])* $field:ident : $fty:ty ),* $(,)? })?
                    = $code:literal, $name:literal, retryable: $retry:literal,
                    $msg:literal $(, $marg:expr)*
                    $(=> wire |$w:ident| $wire:expr)? ;
            )*
        }
        $(codes_only {
            $( $CVariant:ident = $ccode:literal, $cname:literal, retryable: $cretry:literal; )*
        })?
        $(wrapped {
            $(
                $(#[$wmeta:meta])*
                $WVariant:ident $wbody:tt
                    => $(#[$armattr:meta])* $wpat:pat => $wcode:expr, $wname:expr, $wretry:expr;
            )*
        })?
    ) => {
        $(#[$meta])*
        $vis enum $Error {
            $(
                $(#[$vmeta])*
                #[error($msg $(, $marg)*)]
                $Variant $({ $( $(#[$fmeta])* $field : $fty ),* })?,
            )*
            $($(
                $(#[$wmeta])*
                $WVariant $wbody,
            )*)?
        }

        /// The index of each row in the table (own variants, then codes without a variant).
        #[allow(dead_code, non_camel_case_types, clippy::enum_variant_names)]
        enum __ErrorTableRow {
            $($Variant,)*
            $($($CVariant,)*)?
        }

        impl $Error {
            /// Every code of this crate's own, with its name and whether retrying can help: the
            /// one table its `code()`, `name()` and `is_retryable()` read, and that the C ABI, the
            /// Python package and the command line take their names from.
            pub const CODES: &'static [$crate::ErrorCode] = &[
                $($crate::ErrorCode::new($code, $name, concat!($name, "\0"), $retry),)*
                $($($crate::ErrorCode::new($ccode, $cname, concat!($cname, "\0"), $cretry),)*)?
            ];

            /// The row of `code` in [`Self::CODES`], if it is one of this crate's own.
            pub fn own_code_row(code: i32) -> Option<&'static $crate::ErrorCode> {
                $crate::ErrorCode::find(Self::CODES, code)
            }

            /// The stable numeric code (a wrapped error keeps its cause's).
            pub fn code(&self) -> i32 {
                #[allow(unused_variables)]
                match self {
                    $(Self::$Variant { .. } => {
                        Self::CODES[__ErrorTableRow::$Variant as usize].code
                    })*
                    $($( $(#[$armattr])* $wpat => $wcode, )*)?
                }
            }

            /// The name of [`Self::code`] ("ObjectNotFound"), the one the C ABI and the Python
            /// package give it (a wrapped error's is its cause's).
            pub fn name(&self) -> &'static str {
                #[allow(unused_variables)]
                match self {
                    $(Self::$Variant { .. } => {
                        Self::CODES[__ErrorTableRow::$Variant as usize].name
                    })*
                    $($( $(#[$armattr])* $wpat => $wname, )*)?
                }
            }

            /// Whether trying again later can succeed.
            pub fn is_retryable(&self) -> bool {
                #[allow(unused_variables)]
                match self {
                    $(Self::$Variant { .. } => {
                        Self::CODES[__ErrorTableRow::$Variant as usize].retryable
                    })*
                    $($( $(#[$armattr])* $wpat => $wretry, )*)?
                }
            }

            /// The error that the wire form of an own `code` stands for: `None` where no row
            /// of `code` says how to rebuild it, `Some(None)` where its row could not.
            #[allow(dead_code, unused_variables, clippy::redundant_closure_call)]
            pub(crate) fn decode_wire(code: i32, wire: &$Wire) -> Option<Option<Self>> {
                $($(
                    if code == $code {
                        let $w = wire;
                        return Some((|| -> Option<Self> { $wire })());
                    }
                )?)*
                None
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::ErrorCode;

    const fn row(code: i32, name: &'static str, name_nul: &'static str) -> ErrorCode {
        ErrorCode::new(code, name, name_nul, false)
    }

    #[test]
    fn a_table_with_a_shared_code_or_name_or_a_stray_code_is_refused() {
        let good = [row(-10, "A", "A\0"), row(-11, "B", "B\0")];
        assert_eq!(ErrorCode::check_table(&good, -19..=-10), Ok(()));
        let same_code = [row(-10, "A", "A\0"), row(-10, "B", "B\0")];
        let same_name = [row(-10, "A", "A\0"), row(-11, "A", "A\0")];
        let stray = [row(-10, "A", "A\0"), row(-20, "B", "B\0")];
        let spelled = [row(-10, "A", "B\0")];
        for bad in [&same_code[..], &same_name, &stray, &spelled] {
            assert!(ErrorCode::check_table(bad, -19..=-10).is_err(), "{bad:?}");
        }
    }
}
