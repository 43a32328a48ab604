//! Warnings about one root: logged and kept for the caller.

use gatehouse_base::escape::Escaped;

/// The warnings of one root's discovery.
#[derive(Debug)]
pub(crate) struct Warnings {
    root: String,
    list: Vec<String>,
}

impl Warnings {
    /// No warnings yet, for root `root`.
    pub(crate) fn new(root: &str) -> Self {
        Self {
            root: root.to_owned(),
            list: Vec::new(),
        }
    }

    /// Logs `message` (escaped: it may quote a manifest) and keeps it.
    pub(crate) fn push(&mut self, message: String) {
        tracing::warn!(root = %Escaped(&self.root), "{}", Escaped(&message));
        self.list.push(message);
    }

    /// The warnings, in order.
    pub(crate) fn into_vec(self) -> Vec<String> {
        self.list
    }
}
