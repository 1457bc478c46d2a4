//! Bearer tokens and roles of the control API (DESIGN §8): the shared
//! vocabulary of `gpuledger-common`.

pub use gpuledger_common::auth::{Role, TokenSpec, Tokens};
