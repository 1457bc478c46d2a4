//! The ledger's history: `ledger_events`, `decisions` and `allocations`,
//! written by the ledger worker from what each applied event produced.
//!
//! Files are named by the ledger offsets whose rows they hold. A flush
//! writes `decisions` and `allocations` first and `ledger_events` last, so
//! the highest offset in `ledger_events` is the partition's frontier: every
//! row at or below it is durable in every table. On start, files of the
//! other tables beyond the frontier (a flush cut short) are removed, and
//! rows are produced again only for offsets above it. The ledger worker
//! flushes before every snapshot, so the state it restores is never ahead
//! of the history.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::json::ReaderBuilder;
use gpuledger_schemas::Event;
use gpuledger_schemas::billing::Segment;
use gpuledger_schemas::tables::{allocations, decisions, ledger_events};
use serde_json::{Value, json};

use super::layout::{FileName, durable_offsets, remove_beyond, remove_leftovers};
use super::sink::write_file;
use crate::{Error, Result, metrics};

/// The tables, in the order a flush writes them: the marker table last.
const TABLES: [&str; 3] = [decisions::TABLE, allocations::TABLE, ledger_events::TABLE];

fn schema_of(table: &str) -> SchemaRef {
    match table {
        t if t == decisions::TABLE => decisions::SCHEMA.clone(),
        t if t == allocations::TABLE => allocations::SCHEMA.clone(),
        _ => ledger_events::SCHEMA.clone(),
    }
}

/// Rows waiting to be written for one partition: one contiguous offset
/// range of one UTC day.
#[derive(Debug, Default)]
struct Buffer {
    date: String,
    first_offset: Option<i64>,
    last_offset: i64,
    since: Option<std::time::Instant>,
    rows: BTreeMap<&'static str, Vec<Value>>,
}

/// The ledger history of every partition this worker owns.
#[derive(Debug)]
pub struct LedgerHistory {
    root: PathBuf,
    topic: String,
    frontier: BTreeMap<i32, i64>,
    buffers: BTreeMap<i32, Buffer>,
}

impl LedgerHistory {
    /// Opens the history under `root` for `topic`: removes what a crash
    /// left behind and reads each partition's frontier.
    pub fn open(root: &Path, topic: &str) -> Result<Self> {
        for table in TABLES {
            remove_leftovers(root, table)?;
        }
        let durable = durable_offsets(root, ledger_events::TABLE, topic)?;
        for table in [decisions::TABLE, allocations::TABLE] {
            remove_beyond(root, table, topic, &durable)?;
        }
        let frontier: BTreeMap<i32, i64> = durable.into_iter().collect();
        Ok(Self {
            root: root.to_owned(),
            topic: topic.to_owned(),
            frontier,
            buffers: BTreeMap::new(),
        })
    }

    /// The highest offset of `partition` whose rows are durable.
    pub fn frontier(&self, partition: i32) -> Option<i64> {
        self.frontier.get(&partition).copied()
    }

    /// Whether rows of this offset still have to be written.
    pub fn wants(&self, partition: i32, offset: i64) -> bool {
        self.frontier(partition).is_none_or(|f| offset > f)
    }

    /// Buffers the rows of one applied ledger event.
    pub fn push(
        &mut self,
        partition: i32,
        offset: i64,
        event: &Event,
        decisions: &[Event],
        segments: &[Segment],
    ) -> Result<()> {
        if !self.wants(partition, offset) {
            return Ok(());
        }
        let date = event.envelope.event_time.date_string();
        if self
            .buffers
            .get(&partition)
            .is_some_and(|b| b.first_offset.is_some() && b.date != date)
        {
            self.flush(partition)?;
        }
        let buffer = self.buffers.entry(partition).or_default();
        if buffer.first_offset.is_none() {
            buffer.first_offset = Some(offset);
            buffer.date = date;
            buffer.since = Some(std::time::Instant::now());
        }
        buffer.last_offset = offset;
        // A row is the record's JSON form, its ledger position, and the
        // whole record again as `raw`.
        let mut add = |table: &'static str, raw: Value| {
            let mut row = raw.clone();
            row["ledger_partition"] = json!(partition);
            row["ledger_offset"] = json!(offset);
            row["raw"] = Value::String(raw.to_string());
            buffer.rows.entry(table).or_default().push(row);
        };
        add(ledger_events::TABLE, event.to_json_value());
        for d in decisions {
            add(decisions::TABLE, d.to_json_value());
        }
        for s in segments {
            let raw = serde_json::to_value(s).map_err(|e| Error::History(e.to_string()))?;
            add(allocations::TABLE, raw);
        }
        Ok(())
    }

    /// Notes an offset with no rows (a rejected or duplicate event): the
    /// next file's range covers it.
    pub fn skip(&mut self, partition: i32, offset: i64) {
        if let Some(buffer) = self.buffers.get_mut(&partition)
            && buffer.first_offset.is_some()
        {
            buffer.last_offset = buffer.last_offset.max(offset);
        }
    }

    /// Whether `partition`'s buffer has waited at least `age`.
    pub fn due(&self, partition: i32, age: std::time::Duration) -> bool {
        self.buffers
            .get(&partition)
            .and_then(|b| b.since)
            .is_some_and(|since| since.elapsed() >= age)
    }

    /// Writes `partition`'s buffered rows durably, marker table last.
    pub fn flush(&mut self, partition: i32) -> Result<()> {
        let Some(mut buffer) = self.buffers.remove(&partition) else {
            return Ok(());
        };
        let Some(first_offset) = buffer.first_offset else {
            return Ok(());
        };
        let name = FileName {
            topic: self.topic.clone(),
            partition,
            first_offset,
            last_offset: buffer.last_offset,
        };
        for table in TABLES {
            let Some(rows) = buffer.rows.remove(table) else {
                continue;
            };
            let batch = to_batch(schema_of(table), &rows)?;
            tokio::task::block_in_place(|| {
                write_file(&self.root, table, &buffer.date, &name, &batch)
            })?;
            metrics::HISTORY_FILES_WRITTEN.inc();
        }
        self.frontier.insert(partition, buffer.last_offset);
        tracing::debug!(file = %name.render(), "ledger history written");
        Ok(())
    }

    /// Flushes every partition.
    pub fn flush_all(&mut self) -> Result<()> {
        let partitions: Vec<i32> = self.buffers.keys().copied().collect();
        for p in partitions {
            self.flush(p)?;
        }
        Ok(())
    }
}

/// Rows in their JSON form into one batch of `schema`; fields the table
/// does not have are ignored, absent ones are null.
fn to_batch(schema: SchemaRef, rows: &[Value]) -> Result<RecordBatch> {
    let history = |e: arrow::error::ArrowError| Error::History(e.to_string());
    let mut decoder = ReaderBuilder::new(schema)
        .build_decoder()
        .map_err(history)?;
    decoder.serialize(rows).map_err(history)?;
    decoder
        .flush()
        .map_err(history)?
        .ok_or_else(|| Error::History("no rows to write".into()))
}
