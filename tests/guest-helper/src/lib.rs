//! What every test guest under `tests/guests/` shares: the `reviewer` world's
//! bindings, generated once here, and [`Reviewer`], a guest's `review` with a
//! default `describe`. A guest is then its review and one export line:
//!
//! ```text
//! use test_guest_helper::{Decision, Outcome, ReviewRequest, Reviewer};
//!
//! struct Guest;
//!
//! impl Reviewer for Guest {
//!     const NAME: &'static str = "sleep";
//!
//!     fn review(_config: String, _request: ReviewRequest) -> Outcome {
//!         // ...
//!     }
//! }
//!
//! test_guest_helper::export_reviewer!(Guest);
//! ```
//!
//! Guests with a world of their own (`extra-import`, `future-contract`,
//! `wrong-world`) run their own `wit_bindgen::generate!`. Empty except on
//! wasm32, like the guests, so native workspace builds stay quick.
#![cfg(target_arch = "wasm32")]

/// The generated bindings of `gatehouse:reviewer/reviewer` (`wit/`).
pub mod bindings {
    wit_bindgen::generate!({
        world: "reviewer",
        path: "../../wit",
        // The export macro is called from the guest crates, so it is public
        // and names this module by its full path.
        pub_export_macro: true,
        export_macro_name: "export_reviewer",
        default_bindings_module: "test_guest_helper::bindings",
    });
}

pub use bindings::gatehouse::reviewer::logging::{self, Level};
pub use bindings::gatehouse::reviewer::types::*;

/// Exports a type that implements [`Reviewer`] as the component's `review`
/// interface: `test_guest_helper::export_reviewer!(Guest);` once per guest.
pub use bindings::export_reviewer;

/// A test guest: its `review`, and what `describe` reports.
pub trait Reviewer {
    /// The name the default [`Reviewer::describe`] reports.
    const NAME: &'static str;

    /// Defaults to [`Self::NAME`], version `0.0.0` and no claims.
    fn describe() -> ModuleInfo {
        ModuleInfo {
            name: Self::NAME.to_owned(),
            version: "0.0.0".to_owned(),
            claims: Vec::new(),
        }
    }

    /// Reviews one elicitation (`config` is the module's JSON config).
    fn review(config: String, request: ReviewRequest) -> Outcome;
}

impl<T: Reviewer> bindings::exports::gatehouse::reviewer::review::Guest for T {
    fn describe() -> ModuleInfo {
        T::describe()
    }

    fn review(config: String, request: ReviewRequest) -> Outcome {
        T::review(config, request)
    }
}
