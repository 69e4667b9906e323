//! The store the config names: [`AnyStore`] (any of the library's stores,
//! chosen at run time) and [`open_store`] (opening it with the `[store]`
//! settings). `serve`'s gate, `check` and `replay` open theirs here.

mod any;
mod open;

pub use any::AnyStore;
pub use open::open_store;
