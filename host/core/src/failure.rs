//! Why a module's review failed. Every failure fails closed: the chain
//! answers decline (or, where configured, passes the request on), and the
//! failure's [`code`](ReviewFailure::code) goes to the audit log.

use std::time::Duration;

/// A review that produced no usable outcome. Codes are stable and documented
/// in `ARCHITECTURE.md`; tools may match on them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReviewFailure {
    /// The module ran past its deadline and was interrupted.
    #[error("did not finish within its {0:?} deadline")]
    Deadline(Duration),
    /// The module tried to grow its memory past the cap.
    #[error("tried to grow its memory past the {limit}-byte cap")]
    Memory {
        /// The cap in bytes.
        limit: usize,
    },
    /// The module tried to grow a table past the cap.
    #[error("tried to grow a table past the {limit}-element cap")]
    Table {
        /// The cap in elements.
        limit: usize,
    },
    /// The module held more host resources (WASI pollables, streams, ...)
    /// at once than the cap ([`Limits::handles`](crate::sandbox::Limits::handles)).
    #[error("held more than the {limit}-handle cap of host resources at once")]
    Handles {
        /// The cap in handles.
        limit: usize,
    },
    /// The module exhausted its wasm stack.
    #[error("overflowed its wasm stack")]
    StackOverflow,
    /// The module trapped (a panic, `unreachable`, a bad memory access, ...).
    #[error("trapped: {0}")]
    Trap(String),
    /// The module tried to hand the host more data than the output cap, in
    /// its outcome or in one log call.
    #[error("returned more than the {limit}-byte output cap")]
    OutputTooLarge {
        /// The cap.
        limit: usize,
    },
    /// An accept's content is not a JSON object.
    #[error("accepted with content that is not a JSON object: {0}")]
    InvalidContent(String),
    /// An accept's content does not validate against the requested schema.
    #[error("accepted with content that does not match the requested schema: {0}")]
    SchemaMismatch(String),
    /// A URL-mode accept carried content (URL accepts are consent only).
    #[error("accepted a URL-mode elicitation with content; URL accepts carry none")]
    UrlContent,
    /// The module called a host function it is denied (under
    /// [`WasiPolicy::Deny`](crate::sandbox::WasiPolicy::Deny)): files,
    /// environment, arguments or sockets.
    #[error("called `{0}`, which the sandbox denies")]
    DeniedImport(String),
    /// The module could not be instantiated (for example the instance pool
    /// is exhausted).
    #[error("could not be instantiated: {0}")]
    Instantiate(String),
}

impl ReviewFailure {
    /// The stable code of this failure, for logs and tools.
    ///
    /// ```
    /// use gatehouse_core::failure::ReviewFailure;
    /// assert_eq!(ReviewFailure::StackOverflow.code(), "stack-overflow");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            ReviewFailure::Deadline(_) => "deadline",
            ReviewFailure::Memory { .. } => "memory",
            ReviewFailure::Table { .. } => "table",
            ReviewFailure::Handles { .. } => "handles",
            ReviewFailure::StackOverflow => "stack-overflow",
            ReviewFailure::Trap(_) => "trap",
            ReviewFailure::OutputTooLarge { .. } => "output-too-large",
            ReviewFailure::InvalidContent(_) => "invalid-content",
            ReviewFailure::SchemaMismatch(_) => "schema-mismatch",
            ReviewFailure::UrlContent => "url-content",
            ReviewFailure::DeniedImport(_) => "denied-import",
            ReviewFailure::Instantiate(_) => "instantiate",
        }
    }
}
