//! Building blocks shared by the gpuledger services: log set-up, shutdown
//! signals and, behind the `kafka` feature, the Kafka client settings and
//! event delivery used by the collector and the processor. The query
//! service uses this crate without Kafka.

pub mod auth;
pub mod history;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "kafka")]
pub mod kafka_security;
pub mod log;
pub mod metrics;
#[cfg(feature = "kafka")]
mod polled_producer;
pub mod shutdown;
#[cfg(feature = "tls")]
pub mod tls;
