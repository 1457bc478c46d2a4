//! Where the ledger keeps what it knows, apart from the rules: the pools
//! by name, and the records that grow with the ledger (decided admission
//! requests, ended attempts, billing facts). Built of the structures in
//! `gpuledger-collections`; each is tested against a plain map.

pub(crate) mod decided;
pub(crate) mod pools;
pub(crate) mod records;

pub(crate) use pools::Pools;
pub(crate) use records::Records;
