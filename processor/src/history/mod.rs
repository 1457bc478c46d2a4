//! Parquet history (DESIGN §6): one folder per table under a root,
//! Hive-partitioned by UTC day, file names from the Kafka offsets they hold.
//!
//! The files are the record of progress. A file is written under a
//! temporary name, fsynced and renamed, and only then are offsets committed;
//! on start a writer lists its partition's files and skips every record at
//! or below the highest offset found. A crash therefore never duplicates or
//! loses a row.

pub mod compact;
pub mod compact_parts;
pub mod hourly;
pub mod layout;
pub mod ledger;
pub mod ledger_files;
pub mod samples;
pub mod sink;
