//! The store the config names: [`AnyStore`] (any of the library's stores,
//! chosen at run time), [`open_store`] (opening it with the `[store]`
//! settings) and [`with_credentials`] (the password and user joined into
//! its URL from a file or the environment). `serve`'s gate, `check` and
//! `replay` open theirs here.

mod any;
mod credentials;
mod open;

pub use any::AnyStore;
pub use credentials::{PASSWORD_ENV, with_credentials};
pub use open::open_store;
