//! The gpuledger processor: consumes Kafka and keeps the record.
//!
//! It writes every fact to Parquet history and (in later parts) folds the
//! ledger into quota, reservation and budget decisions. The state machine
//! stays pure; everything here that talks to Kafka or disk wraps it.

pub mod answers;
pub mod api;
pub mod applied;
mod batch_reader;
pub mod burst_hook;
pub mod generate;
pub mod history;
pub mod ledger;
pub mod ledger_worker;
pub mod metrics;
pub mod offline;
pub mod progress;
pub mod replay;
pub mod rules;
pub mod snapshot;
pub mod telemetry;

/// What went wrong in the processor.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Kafka settings or delivery.
    #[error(transparent)]
    Kafka(#[from] gpuledger_common::kafka::Error),
    /// The Kafka client.
    #[error("Kafka client error: {0}")]
    Client(#[from] rdkafka::error::KafkaError),
    /// Reading or writing history files.
    #[error("history I/O: {0}")]
    Io(#[from] std::io::Error),
    /// Building a history batch.
    #[error("history batch: {0}")]
    History(String),
    /// Running the ledger.
    #[error("ledger: {0}")]
    Ledger(String),
    /// Setting up how a Kafka consumer reads.
    #[error("Kafka consumer: {0}")]
    Consumer(String),
}

/// Result with the processor's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
