//! The gpuledger event contract (DESIGN §2, §3, §5, §11).
//!
//! This crate owns what travels between the services and what money means:
//! the Avro schemas (`avro/vN/*.avsc`, every released version kept), the
//! Rust types that match them, the Kafka wire codec (Avro single-object
//! encoding plus CloudEvents headers), the JSON form used by the HTTP APIs
//! and NDJSON files, validation, and the price books with the one cost
//! function both the processor and the query service call.
//!
//! It does no I/O and knows nothing of Kafka clients, Parquet or HTTP.

#[macro_use]
mod avro;

pub mod billing;
pub mod error;
pub mod events;
pub mod exact;
mod json;
pub mod pricing;
pub mod sample_datum;
pub mod samples;
#[cfg(feature = "arrow")]
pub mod tables;
pub mod time;
mod validate;

/// The bounds every event is checked against: instants, slices, digits.
pub mod limits {
    pub use crate::exact::MAX_DIGITS;
    pub use crate::validate::{EARLIEST, LATEST, MAX_SLICES};
}
pub mod wire;

pub use error::{Error, Result};
pub use events::{Envelope, Event, EventBody, EventType, Topic};
pub use exact::{Decimal, Rational};
pub use gpuledger_collections::Text;
pub use sample_datum::SampleRecord;
pub use time::Timestamp;
pub use wire::{Codec, EVENT_ID_HEADER, cloud_event_headers};
