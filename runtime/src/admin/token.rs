//! The admin token: the shared secret an operator presents as
//! `Authorization: Bearer <token>` to call the admin port's mutating
//! endpoints (T4).
//!
//! Why a type of its own: the token must never reach a log, an error
//! message or a `Debug` print of the configuration, and it must only be
//! compared in constant time. [`AdminToken`] prints as `AdminToken(..)`, and
//! its only comparison, [`AdminToken::matches`], takes the same time
//! whatever the presented bytes are (it depends on the configured token's
//! length only), so a caller cannot find the token byte by byte by timing
//! refusals.

use std::fmt;

use subtle::{Choice, ConstantTimeEq};

/// The shortest token accepted: 16 bytes of visible ASCII. `cohort` makes
/// no token itself; `openssl rand -hex 32` gives a good one.
pub const ADMIN_TOKEN_MIN_BYTES: usize = 16;

/// The longest token accepted (it travels in one HTTP header line).
pub const ADMIN_TOKEN_MAX_BYTES: usize = 1024;

/// The admin port's shared secret. Construct it with [`AdminToken::new`],
/// which checks the rules above.
#[derive(Clone, Eq)]
pub struct AdminToken(String);

/// Why a token was refused (the configuration error names the key).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Shorter than [`ADMIN_TOKEN_MIN_BYTES`].
    #[error("is {length} bytes long; use at least {ADMIN_TOKEN_MIN_BYTES} (e.g. `openssl rand -hex 32`)")]
    TooShort {
        /// Its length.
        length: usize,
    },
    /// Longer than [`ADMIN_TOKEN_MAX_BYTES`].
    #[error("is {length} bytes long; use at most {ADMIN_TOKEN_MAX_BYTES}")]
    TooLong {
        /// Its length.
        length: usize,
    },
    /// A byte that cannot stand in an HTTP header value unquoted.
    #[error(
        "has a byte at offset {offset} that is not visible ASCII (spaces and control characters cannot be sent in a header)"
    )]
    NotVisibleAscii {
        /// Where.
        offset: usize,
    },
}

impl AdminToken {
    /// A token from its text, if it follows the rules of this module.
    pub fn new(text: impl Into<String>) -> Result<AdminToken, TokenError> {
        let text = text.into();
        AdminToken::check(&text)?;
        Ok(AdminToken(text))
    }

    /// Check `text` against the rules without keeping it.
    pub fn check(text: &str) -> Result<(), TokenError> {
        let length = text.len();
        if length < ADMIN_TOKEN_MIN_BYTES {
            return Err(TokenError::TooShort { length });
        }
        if length > ADMIN_TOKEN_MAX_BYTES {
            return Err(TokenError::TooLong { length });
        }
        match text.bytes().position(|byte| !byte.is_ascii_graphic()) {
            Some(offset) => Err(TokenError::NotVisibleAscii { offset }),
            None => Ok(()),
        }
    }

    /// The token's text, to send it (the CLI) or to compare it elsewhere.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// True if `presented` is this token. Constant time in `presented`:
    /// every byte of the configured token is compared, whatever matched
    /// before, and a presented value of another length is compared against
    /// the configured bytes all the same.
    pub(crate) fn matches(&self, presented: &[u8]) -> bool {
        let expected = self.0.as_bytes();
        let same_length: Choice = (presented.len() as u64).ct_eq(&(expected.len() as u64));
        let mut same_bytes = Choice::from(1);
        for (index, byte) in expected.iter().enumerate() {
            // Past the presented value's end, compare with a byte that can
            // never match a token byte (0 is not visible ASCII).
            let other = presented.get(index).copied().unwrap_or(0);
            same_bytes &= other.ct_eq(byte);
        }
        bool::from(same_length & same_bytes)
    }
}

impl PartialEq for AdminToken {
    fn eq(&self, other: &AdminToken) -> bool {
        self.matches(other.0.as_bytes())
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("AdminToken(..)")
    }
}

/// Deserialized as a plain string, unchecked: the configuration checks it
/// (so the error names the key, `admin.token`).
impl<'de> serde::Deserialize<'de> for AdminToken {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<AdminToken, D::Error> {
        String::deserialize(deserializer).map(AdminToken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef-token";

    #[test]
    fn t4_only_the_exact_token_matches() {
        let token = AdminToken::new(TOKEN).expect("a valid token");
        assert!(token.matches(TOKEN.as_bytes()));
        for other in ["", "0123456789abcdef-toke", "0123456789abcdef-tokenx", "1123456789abcdef-token", "x"] {
            assert!(!token.matches(other.as_bytes()), "{other:?}");
        }
        // A prefix padded with NULs is still not the token.
        let mut padded = b"0123456789abcdef-toke".to_vec();
        padded.push(0);
        assert!(!token.matches(&padded));
    }

    #[test]
    fn t4_tokens_follow_the_rules() {
        assert_eq!(AdminToken::check("short"), Err(TokenError::TooShort { length: 5 }));
        assert_eq!(AdminToken::check("has a space in it!"), Err(TokenError::NotVisibleAscii { offset: 3 }));
        assert_eq!(AdminToken::check("tab\tseparated-token"), Err(TokenError::NotVisibleAscii { offset: 3 }));
        assert!(matches!(AdminToken::check(&"a".repeat(2000)), Err(TokenError::TooLong { .. })));
        assert_eq!(AdminToken::check(TOKEN), Ok(()));
    }

    #[test]
    fn t4_the_token_never_prints() {
        let token = AdminToken::new(TOKEN).expect("a valid token");
        assert_eq!(format!("{token:?}"), "AdminToken(..)");
        assert!(!format!("{:?}", Some(&token)).contains(TOKEN));
    }
}
