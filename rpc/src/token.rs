//! The cluster token: a shared secret every connection presents before anything else is read.
//!
//! A [`Token`] never prints its value (`Debug` shows `Token(<redacted>)` and there is no
//! `Display`), so a configuration logged with `{:?}` does not leak it, and it compares in
//! constant time. The rpc preamble, the engine's tcp data port and its shm side channel all
//! carry the same token.

use std::sync::Arc;

use crate::error::Error;

/// Longest token accepted, in bytes (the preamble's limit).
pub const MAX_TOKEN_LEN: usize = 1024;

/// A cluster token. Cheap to clone; never printed.
#[derive(Clone)]
pub struct Token(Arc<[u8]>);

impl Token {
    /// A token from its text: 1 to [`MAX_TOKEN_LEN`] bytes of visible ASCII (no spaces or
    /// control characters, so a stray newline from a token file cannot split a cluster).
    pub fn new(text: impl Into<String>) -> Result<Token, Error> {
        let text = text.into();
        let invalid = |reason: String| Error::InvalidToken { reason };
        if text.is_empty() {
            return Err(invalid("the token is empty".into()));
        }
        if text.len() > MAX_TOKEN_LEN {
            return Err(invalid(format!(
                "the token is {} bytes long, at most {MAX_TOKEN_LEN} are allowed",
                text.len()
            )));
        }
        if let Some(at) = text.bytes().position(|b| !b.is_ascii_graphic()) {
            return Err(invalid(format!(
                "the token holds a space, control or non-ASCII character at byte {at}"
            )));
        }
        Ok(Token(text.into_bytes().into()))
    }

    /// A token as a peer sent it, unchecked: it only ever meets [`Token::matches`], and bytes
    /// that [`Token::new`] would refuse match no configured token.
    pub(crate) fn received(bytes: Vec<u8>) -> Token {
        Token(bytes.into())
    }

    /// Reads a token from a file (so that it stays off command lines and out of `ps`); one
    /// trailing newline is ignored.
    pub fn from_file(path: &std::path::Path) -> Result<Token, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::InvalidToken {
            reason: format!("token file {}: {e}", path.display()),
        })?;
        let text = text.strip_suffix('\n').unwrap_or(&text);
        let text = text.strip_suffix('\r').unwrap_or(text);
        Token::new(text).map_err(|e| Error::InvalidToken {
            reason: format!("token file {}: {e}", path.display()),
        })
    }

    /// The token's bytes, to put on the wire.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// Whether `given` is this token, compared in constant time.
    pub fn matches(&self, given: &[u8]) -> bool {
        constant_time_eq::constant_time_eq(self.as_bytes(), given)
    }

    /// Whether a peer presenting `given` (nothing when `None`) is admitted where `expected` is
    /// required (anyone is, when `None`).
    pub fn admits(expected: Option<&Token>, given: Option<&[u8]>) -> bool {
        expected.is_none_or(|t| t.matches(given.unwrap_or_default()))
    }
}

impl PartialEq for Token {
    fn eq(&self, other: &Token) -> bool {
        self.matches(other.as_bytes())
    }
}

impl Eq for Token {}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Unit tests name tokens as string literals.
#[cfg(test)]
impl From<&str> for Token {
    fn from(text: &str) -> Token {
        Token::new(text).expect("a valid test token")
    }
}

impl std::str::FromStr for Token {
    type Err = Error;

    fn from_str(s: &str) -> Result<Token, Error> {
        Token::new(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_printed_compared_by_value_and_checked_at_construction() {
        let t = Token::new("s3cret-Token").unwrap();
        assert_eq!(format!("{t:?}"), "Token(<redacted>)");
        assert!(!format!("{:?}", Some(t.clone())).contains("s3cret"));
        assert!(t.matches(b"s3cret-Token") && !t.matches(b"s3cret-Toke"));
        assert_eq!(t, "s3cret-Token".parse().unwrap());
        assert!(Token::admits(None, None));
        assert!(!Token::admits(Some(&t), None));
        assert!(Token::admits(Some(&t), Some(b"s3cret-Token")));
        for bad in ["", "two words", "new\nline", "tab\t", "ünï"] {
            let e = Token::new(bad).unwrap_err();
            assert_eq!(e.code(), -2015, "{bad:?}: {e}");
            assert!(!bad.is_empty() || e.to_string().contains("empty"));
        }
        assert!(Token::new("x".repeat(MAX_TOKEN_LEN)).is_ok());
        assert!(Token::new("x".repeat(MAX_TOKEN_LEN + 1)).is_err());
    }

    #[test]
    fn a_token_file_may_end_in_one_newline() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "abc\n").unwrap();
        assert_eq!(Token::from_file(&path).unwrap(), Token::new("abc").unwrap());
        std::fs::write(&path, "abc\n\n").unwrap();
        assert!(Token::from_file(&path).is_err());
        let e = Token::from_file(&dir.path().join("missing")).unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
    }
}
