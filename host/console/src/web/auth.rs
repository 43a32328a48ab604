//! Who may use the console: the holder of its token, for a session.
//!
//! The token ([`Token`]) is only ever compared, in constant time, as a
//! SHA-256 digest. Logging in with it starts a [`Session`]: a random cookie
//! (`HttpOnly`, `SameSite=Strict`, path `/`) that the console keeps only as
//! a digest, a public id that names the session in audit lines, and a CSRF
//! token every action must carry. Sessions end after [`SESSION_LIFETIME`]
//! or at logout; at most [`MAX_SESSIONS`] live at once (the oldest goes).
//! Guessing is bounded by the token's entropy, not by a lockout (which any
//! local process could use to keep the person out): the web side answers a
//! wrong token only after [`WRONG_TOKEN_DELAY`], and checks at most
//! [`MAX_LOGINS_AT_ONCE`] logins at once.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::hub::random;

/// The name of the session cookie.
pub const COOKIE: &str = "gatehouse_console";

/// How long a session lasts.
pub const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// Sessions alive at once.
pub const MAX_SESSIONS: usize = 64;

/// How long a wrong token waits for its refusal.
pub const WRONG_TOKEN_DELAY: Duration = Duration::from_millis(500);

/// Logins checked at once; more are refused at once, unchecked.
pub const MAX_LOGINS_AT_ONCE: usize = 16;

/// The shortest token an operator may set.
pub const MIN_TOKEN_LEN: usize = 16;

/// The console's login token.
pub struct Token {
    digest: [u8; 32],
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(…)")
    }
}

impl Token {
    /// A token from its text (an operator's choice: at least
    /// [`MIN_TOKEN_LEN`] characters).
    pub fn new(text: &str) -> Result<Token, String> {
        let text = text.trim();
        if text.chars().count() < MIN_TOKEN_LEN {
            return Err(format!(
                "the console token is too short: at least {MIN_TOKEN_LEN} characters"
            ));
        }
        Ok(Token {
            digest: Sha256::digest(text.as_bytes()).into(),
        })
    }

    /// A fresh random token, and its text (to print once).
    pub fn generate() -> (Token, String) {
        let mut bytes = [0u8; 24];
        random(&mut bytes);
        let text = hex::encode(bytes);
        let digest = Sha256::digest(text.as_bytes()).into();
        (Token { digest }, text)
    }

    /// Whether `candidate` is the token (in constant time).
    pub fn matches(&self, candidate: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(candidate.trim().as_bytes()).into();
        bool::from(self.digest.ct_eq(&digest))
    }
}

/// A logged-in browser.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Its public id (names it on the page and in audit lines).
    pub id: String,
    /// The token every action must carry.
    pub csrf: String,
}

struct Live {
    session: Session,
    started: Instant,
}

/// The sessions.
pub struct Sessions {
    live: Mutex<HashMap<[u8; 32], Live>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sessions").finish_non_exhaustive()
    }
}

impl Default for Sessions {
    fn default() -> Self {
        Sessions {
            live: Mutex::new(HashMap::new()),
        }
    }
}

/// Why a login was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoginRefused {
    /// Wrong token.
    WrongToken,
}

impl Sessions {
    /// Logs in with `candidate`; returns the session and its cookie value.
    pub fn login(&self, token: &Token, candidate: &str) -> Result<(Session, String), LoginRefused> {
        if !token.matches(candidate) {
            return Err(LoginRefused::WrongToken);
        }
        let cookie = random_hex(32);
        let session = Session {
            id: random_hex(4),
            csrf: random_hex(32),
        };
        let mut live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|_, l| l.started.elapsed() < SESSION_LIFETIME);
        if live.len() >= MAX_SESSIONS
            && let Some(oldest) = live
                .iter()
                .min_by_key(|(_, l)| l.started)
                .map(|(key, _)| *key)
        {
            live.remove(&oldest);
        }
        live.insert(
            digest(&cookie),
            Live {
                session: session.clone(),
                started: Instant::now(),
            },
        );
        Ok((session, cookie))
    }

    /// The session a cookie value belongs to, if it is alive.
    pub fn session(&self, cookie: &str) -> Option<Session> {
        let live = self.live.lock().unwrap_or_else(PoisonError::into_inner);
        let found = live.get(&digest(cookie))?;
        (found.started.elapsed() < SESSION_LIFETIME).then(|| found.session.clone())
    }

    /// Ends the session of a cookie value.
    pub fn logout(&self, cookie: &str) {
        self.live
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&digest(cookie));
    }
}

/// Whether `given` is the session's CSRF token (in constant time).
pub fn csrf_matches(session: &Session, given: &str) -> bool {
    bool::from(digest(&session.csrf).ct_eq(&digest(given)))
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

fn random_hex(bytes: usize) -> String {
    let mut buffer = vec![0u8; bytes];
    random(&mut buffer);
    hex::encode(buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_token_logs_in_and_wrong_ones_lock_nobody_out() {
        let token = Token::new("correct horse battery staple").unwrap();
        assert!(Token::new("short").is_err());
        let sessions = Sessions::default();
        for _ in 0..100 {
            assert_eq!(
                sessions.login(&token, "wrong").unwrap_err(),
                LoginRefused::WrongToken
            );
        }
        // However many wrong tokens came first, the right one logs in.
        let (session, cookie) = sessions
            .login(&token, "correct horse battery staple")
            .unwrap();
        assert_eq!(sessions.session(&cookie), Some(session.clone()));
        assert!(sessions.session("forged").is_none());
        assert!(csrf_matches(&session, &session.csrf));
        assert!(!csrf_matches(&session, ""));
        sessions.logout(&cookie);
        assert!(sessions.session(&cookie).is_none());
    }

    #[test]
    fn sessions_are_bounded() {
        let (token, text) = Token::generate();
        let sessions = Sessions::default();
        let (_, first) = sessions.login(&token, &text).unwrap();
        for _ in 0..MAX_SESSIONS {
            sessions.login(&token, &text).unwrap();
        }
        assert!(sessions.session(&first).is_none(), "the oldest went");
    }
}
