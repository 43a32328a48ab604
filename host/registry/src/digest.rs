//! A content digest as OCI writes it: `sha256:` and 64 lowercase hex
//! digits. The only algorithm accepted; anything else (another algorithm,
//! upper case, another length, a path) is refused, so a digest is always
//! safe to use as a file name.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest as _, Sha256};

/// The one algorithm a digest may name.
pub const ALGORITHM: &str = "sha256";

/// A checked `sha256:<64 lowercase hex>` digest.
///
/// ```
/// use gatehouse_registry::Digest;
/// let digest = Digest::of(b"{}");
/// assert_eq!(
///     digest.to_string(),
///     "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
/// );
/// assert_eq!(digest.to_string().parse::<Digest>(), Ok(digest));
/// assert!("sha512:00".parse::<Digest>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Digest {
    hex: String,
}

/// Why a text is not a digest.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    /// No `algorithm:` prefix.
    #[error("{0:?} is not a digest: write sha256:<64 lowercase hex digits>")]
    NoAlgorithm(String),
    /// An algorithm other than sha256.
    #[error("digest {text:?}: the algorithm {algorithm:?} is not supported; only sha256 is")]
    Algorithm {
        /// The text.
        text: String,
        /// The algorithm it names.
        algorithm: String,
    },
    /// The hex part is not 64 lowercase hex digits.
    #[error("digest {0:?}: after sha256: come exactly 64 lowercase hex digits")]
    Hex(String),
}

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest {
            hex: hex::encode(Sha256::digest(bytes)),
        }
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.hex
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{ALGORITHM}:{}", self.hex)
    }
}

impl FromStr for Digest {
    type Err = DigestError;

    fn from_str(text: &str) -> Result<Digest, DigestError> {
        let Some((algorithm, hex)) = text.split_once(':') else {
            return Err(DigestError::NoAlgorithm(text.to_owned()));
        };
        if algorithm != ALGORITHM {
            return Err(DigestError::Algorithm {
                text: text.to_owned(),
                algorithm: algorithm.to_owned(),
            });
        }
        let well_formed = hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        if !well_formed {
            return Err(DigestError::Hex(text.to_owned()));
        }
        Ok(Digest {
            hex: hex.to_owned(),
        })
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Digest, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sha256_with_64_lowercase_hex_digits_is_a_digest() {
        let good = Digest::of(b"module");
        assert_eq!(good.to_string().parse::<Digest>(), Ok(good.clone()));
        for bad in [
            "",
            "sha256",
            "module.wasm",
            "sha512:00",
            "SHA256:00",
            "sha256:",
            "sha256:../../../etc/passwd",
            &format!("sha256:{}", good.hex().to_uppercase()),
            &format!("sha256:{}", &good.hex()[..63]),
            &format!("sha256:{}0", good.hex()),
            &format!("sha256:{}/", &good.hex()[..63]),
        ] {
            assert!(bad.parse::<Digest>().is_err(), "{bad:?}");
        }
        let message = "md5:00".parse::<Digest>().unwrap_err().to_string();
        assert!(
            message.contains("\"md5\"") && message.contains("only sha256"),
            "{message}"
        );
    }
}
