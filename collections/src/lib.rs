//! The data structures gpuledger keeps its state in, apart from the rules
//! that use them. Each is tested against the plain `BTreeMap` or `Vec` it
//! stands for.
//!
//! - [`Text`]: shared, immutable text for the names events carry.
//! - [`by_name`]: a few entries by short name, and [`same_text`].
//! - [`by_text`]: many entries by text, hashed once per lookup.
//! - [`text_ids`]: texts numbered in the order first seen.
//! - [`by_attempt`]: entries by (job, attempt).
//! - [`few`]: a handful of values kept in place.
//! - [`chunked`]: a list that grows without moving what it holds.

pub mod by_attempt;
pub mod by_name;
pub mod by_text;
pub mod chunked;
pub mod few;
pub mod text;
pub mod text_ids;

pub use by_name::{ByName, same_text};
pub use text::Text;
