//! A module's reference in a registry: `HOST[:PORT]/REPO[:TAG][@sha256:…]`.
//!
//! The registry host is always written out. A bare `team/guardian:1` would
//! mean Docker Hub to Docker and to `oci-client`; for code that decides what
//! an agent may do, where it comes from is never implied.
//!
//! ```
//! use gatehouse_registry::ModuleRef;
//!
//! let tagged: ModuleRef = "registry.example.com:5000/team/guardian:1.2".parse()?;
//! assert_eq!(tagged.registry(), "registry.example.com:5000");
//! assert_eq!(tagged.repository(), "team/guardian");
//! assert_eq!(tagged.tag(), Some("1.2"));
//! assert!(tagged.digest().is_none());
//!
//! // Without a host it is refused, with what to write instead.
//! let err = "team/guardian:1.2".parse::<ModuleRef>().unwrap_err();
//! assert!(err.to_string().contains("name the registry host"), "{err}");
//! # Ok::<(), gatehouse_registry::RefError>(())
//! ```

use std::fmt;
use std::str::FromStr;

use crate::digest::Digest;

/// The longest reference accepted (the distribution spec's 255-character
/// repository name, a host, a tag and a digest).
pub const MAX_REF_CHARS: usize = 512;

/// A parsed module reference with its registry host written out.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ModuleRef {
    inner: oci_client::Reference,
    digest: Option<Digest>,
}

/// Why a reference is refused.
#[derive(Debug, thiserror::Error)]
pub enum RefError {
    /// Not a reference at all.
    #[error("module reference `{text}`: {reason}")]
    Invalid {
        /// The text, escaped.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No registry host.
    #[error(
        "module reference `{text}`: name the registry host, e.g. `registry.example.com/{text}` or `localhost:5000/{text}`"
    )]
    NoHost {
        /// The text, escaped.
        text: String,
    },
    /// A digest other than `sha256:` and 64 lowercase hex digits.
    #[error("module reference `{text}`: {source}")]
    Digest {
        /// The text, escaped.
        text: String,
        /// What is wrong with the digest.
        source: crate::digest::DigestError,
    },
}

impl FromStr for ModuleRef {
    type Err = RefError;

    fn from_str(text: &str) -> Result<ModuleRef, RefError> {
        let shown =
            || gatehouse_base::escape::escape(&gatehouse_base::cut::cut(text, 200)).into_owned();
        if text.len() > MAX_REF_CHARS {
            return Err(RefError::Invalid {
                text: shown(),
                reason: format!("longer than {MAX_REF_CHARS} characters"),
            });
        }
        if text.trim() != text || text.is_empty() {
            return Err(RefError::Invalid {
                text: shown(),
                reason: "empty, or with spaces around it".to_owned(),
            });
        }
        // Docker's rule for what the first component is: a host when it has
        // a dot or a port, or is `localhost`.
        let first = text.split('/').next().unwrap_or_default();
        let names_host = text.contains('/')
            && (first.contains('.') || first.contains(':') || first == "localhost");
        if !names_host {
            return Err(RefError::NoHost { text: shown() });
        }
        // The digest first, for an error that says what a digest is.
        if let Some((_, digest)) = text.rsplit_once('@') {
            digest
                .parse::<Digest>()
                .map_err(|source| RefError::Digest {
                    text: shown(),
                    source,
                })?;
        }
        let inner: oci_client::Reference = text.parse().map_err(|err| RefError::Invalid {
            text: shown(),
            reason: format!("{err}"),
        })?;
        let digest = inner
            .digest()
            .map(str::parse::<Digest>)
            .transpose()
            .map_err(|source| RefError::Digest {
                text: shown(),
                source,
            })?;
        Ok(ModuleRef { inner, digest })
    }
}

impl ModuleRef {
    /// The registry, `HOST[:PORT]`.
    pub fn registry(&self) -> &str {
        self.inner.registry()
    }

    /// The host without its port (for the loopback and `insecure` checks).
    pub fn host(&self) -> &str {
        host_of(self.registry())
    }

    /// The repository within the registry.
    pub fn repository(&self) -> &str {
        self.inner.repository()
    }

    /// The repository's last component (`guardian` of `team/guardian`): a
    /// module's name in the chain unless its entry gives one.
    pub fn short_name(&self) -> &str {
        let repository = self.repository();
        repository.rsplit('/').next().unwrap_or(repository)
    }

    /// The tag: as written, or `latest` when neither tag nor digest was
    /// (as everywhere).
    pub fn tag(&self) -> Option<&str> {
        self.inner.tag()
    }

    /// The digest, when the reference pins one.
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// The same repository pinned at `digest` (the tag kept for display).
    pub fn pinned(&self, digest: &Digest) -> ModuleRef {
        let inner = match self.inner.tag() {
            Some(tag) => oci_client::Reference::with_tag_and_digest(
                self.registry().to_owned(),
                self.repository().to_owned(),
                tag.to_owned(),
                digest.to_string(),
            ),
            None => oci_client::Reference::with_digest(
                self.registry().to_owned(),
                self.repository().to_owned(),
                digest.to_string(),
            ),
        };
        ModuleRef {
            inner,
            digest: Some(digest.clone()),
        }
    }

    /// The same repository at another tag (a signature's `sha256-….sig`).
    pub fn with_tag(&self, tag: &str) -> ModuleRef {
        ModuleRef {
            inner: oci_client::Reference::with_tag(
                self.registry().to_owned(),
                self.repository().to_owned(),
                tag.to_owned(),
            ),
            digest: None,
        }
    }

    /// `HOST[:PORT]/REPO` without tag or digest (what trust patterns match).
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry(), self.repository())
    }

    /// The reference as `oci-client` takes it.
    pub(crate) fn oci(&self) -> &oci_client::Reference {
        &self.inner
    }
}

impl fmt::Display for ModuleRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())?;
        if let Some(tag) = self.tag() {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// `HOST` of `HOST[:PORT]`, brackets of an IPv6 literal removed.
pub(crate) fn host_of(registry: &str) -> &str {
    if let Some(rest) = registry.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    registry.split(':').next().unwrap_or(registry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_keep_their_parts_and_print_back() {
        let hex = "a".repeat(64);
        for (text, registry, repo, tag, digest) in [
            (
                "localhost:5000/guardian:1",
                "localhost:5000",
                "guardian",
                Some("1"),
                false,
            ),
            (
                "reg.example.com/org/team/guardian",
                "reg.example.com",
                "org/team/guardian",
                Some("latest"),
                false,
            ),
            (
                &*format!("127.0.0.1:5000/g@sha256:{hex}"),
                "127.0.0.1:5000",
                "g",
                None,
                true,
            ),
        ] {
            let parsed: ModuleRef = text.parse().expect(text);
            assert_eq!(parsed.registry(), registry);
            assert_eq!(parsed.repository(), repo);
            assert_eq!(parsed.tag(), tag);
            assert_eq!(
                parsed.short_name(),
                repo.rsplit('/').next().expect("a name")
            );
            assert_eq!(parsed.digest().is_some(), digest);
            let shown = parsed.to_string();
            assert!(shown.starts_with(text), "{shown}");
        }
    }

    #[test]
    fn bad_references_are_refused_with_the_reason() {
        for (text, says) in [
            ("guardian:1", "name the registry host"),
            ("team/guardian", "name the registry host"),
            ("", "empty"),
            (" localhost:5000/g:1", "spaces"),
            ("localhost:5000/G:1", "module reference"),
            ("localhost:5000/g@sha256:abc", "64 lowercase hex"),
            ("localhost:5000/g@md5:0123", "only sha256"),
        ] {
            let err = text.parse::<ModuleRef>().expect_err(text).to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
        let long = format!("localhost/{}", "a".repeat(600));
        assert!(long.parse::<ModuleRef>().is_err());
    }

    #[test]
    fn hostile_text_is_escaped_in_the_error() {
        let err = "evil\u{1b}[2J/x\n"
            .parse::<ModuleRef>()
            .expect_err("refused");
        let text = err.to_string();
        assert!(!text.contains('\u{1b}') && !text.contains('\n'), "{text:?}");
    }

    #[test]
    fn pinning_keeps_the_tag_and_adds_the_digest() {
        let parsed: ModuleRef = "localhost:5000/g:1".parse().expect("parses");
        let digest = Digest::of(b"x");
        let pinned = parsed.pinned(&digest);
        assert_eq!(pinned.digest(), Some(&digest));
        assert_eq!(pinned.to_string(), format!("localhost:5000/g:1@{digest}"));
        assert_eq!(host_of("[::1]:5000"), "::1");
        assert_eq!(host_of("localhost:5000"), "localhost");
    }
}
