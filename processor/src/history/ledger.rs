//! The ledger's history, written by the ledger worker from what each
//! applied event produced: `ledger_events`, `decisions` and `allocations`,
//! and the facts some events carry in tables of their own —
//! `reservations` (reservation decisions), `policies`, `price_books` (a
//! row per model rate), `usage_records` and `inventory` (a row per device).
//!
//! Files are named by the ledger offsets whose rows they hold. A flush
//! writes `decisions` and `allocations` first and `ledger_events` last, so
//! the highest offset in `ledger_events` is the partition's frontier: every
//! row at or below it is durable in every table. On start, files of the
//! other tables beyond the frontier (a flush cut short) are removed, and
//! rows are produced again only for offsets above it. The ledger worker
//! flushes before every snapshot and saves the snapshot only once that
//! flush is written, so the state it restores is never ahead of the
//! history. Flushes are written on a thread of their own
//! ([`super::ledger_files`]), so the worker never waits for a disk.

use gpuledger_common::history::HistoryRoot;
use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::json::ReaderBuilder;
use gpuledger_schemas::Event;
use gpuledger_schemas::EventBody;
use gpuledger_schemas::billing::Segment;
use gpuledger_schemas::tables::{
    self, allocations, decisions, inventory, ledger_events, policies, price_books, reservations,
    usage_records,
};
use serde_json::{Value, json};

use super::layout::{FileName, durable_offsets, remove_beyond, remove_leftovers};
use super::ledger_files::{Files, Flush, Written};
use crate::{Error, Result};

/// The tables, in the order a flush writes them: the marker table last.
const TABLES: [&str; 8] = [
    decisions::TABLE,
    allocations::TABLE,
    reservations::TABLE,
    policies::TABLE,
    price_books::TABLE,
    usage_records::TABLE,
    inventory::TABLE,
    ledger_events::TABLE,
];

pub(super) fn schema_of(table: &str) -> Result<SchemaRef> {
    tables::all()
        .into_iter()
        .find(|(name, _)| *name == table)
        .map(|(_, schema)| schema)
        .ok_or_else(|| Error::History(format!("no table {table:?}")))
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
    topic: String,
    /// The highest offset of each partition whose rows are written or
    /// handed to the writer thread.
    frontier: BTreeMap<i32, i64>,
    buffers: BTreeMap<i32, Buffer>,
    files: Files,
}

impl LedgerHistory {
    /// Opens the history under `root` for `topic`, owning no partition
    /// yet: see [`adopt`] and [`LedgerHistory::adopted`].
    pub fn open(root: &HistoryRoot, topic: &str) -> Result<Self> {
        Ok(Self {
            topic: topic.to_owned(),
            frontier: BTreeMap::new(),
            buffers: BTreeMap::new(),
            files: Files::start(root, &TABLES)?,
        })
    }

    /// Takes `partition` on, at `frontier` (what [`adopt`] found).
    pub fn adopted(&mut self, partition: i32, frontier: Option<i64>) {
        self.buffers.remove(&partition);
        match frontier {
            Some(f) => self.frontier.insert(partition, f),
            None => self.frontier.remove(&partition),
        };
    }

    /// Lets `partition` go: its rows not yet buffered are dropped (the next
    /// owner replays them from the committed offset and writes them), and
    /// what was handed to the writer is written before this returns, so no
    /// file of it appears once another owner may be writing.
    pub fn release(&mut self, partition: i32) -> Result<()> {
        self.buffers.remove(&partition);
        self.frontier.remove(&partition);
        // A wait for the disk: other tasks of the runtime go on meanwhile.
        tokio::task::block_in_place(|| self.files.written().wait())
    }

    /// A ticket for every row flushed so far: durable once it is kept.
    pub fn written(&self) -> Written {
        self.files.written()
    }

    /// The highest offset of `partition` whose rows are durable once
    /// [`LedgerHistory::written`] is kept.
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
        decisions: &[Arc<Event>],
        segments: &[Arc<Segment>],
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
        // A row is the record's JSON form (or a part of it), its ledger
        // position, and the whole record again as `raw`.
        let mut add = |table: &'static str, mut row: Value, raw: &str| {
            row["ledger_partition"] = json!(partition);
            row["ledger_offset"] = json!(offset);
            row["raw"] = Value::String(raw.to_owned());
            buffer.rows.entry(table).or_default().push(row);
        };
        let records = std::iter::once((ledger_events::TABLE, event))
            .chain(decisions.iter().map(|d| (decisions::TABLE, &**d)));
        for (table, e) in records {
            let json = e.to_json_value();
            let raw = json.to_string();
            for (fact_table, row) in fact_rows(e, &json) {
                add(fact_table, row, &raw);
            }
            add(table, json, &raw);
        }
        for s in segments {
            let row = serde_json::to_value(&**s).map_err(|e| Error::History(e.to_string()))?;
            let raw = row.to_string();
            add(allocations::TABLE, row, &raw);
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

    /// Hands `partition`'s buffered rows to the writer thread, which
    /// writes them durably, marker table last.
    pub fn flush(&mut self, partition: i32) -> Result<()> {
        let Some(buffer) = self.buffers.remove(&partition) else {
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
        self.files.hand(Flush {
            name,
            date: buffer.date,
            rows: buffer.rows,
        })?;
        self.frontier.insert(partition, buffer.last_offset);
        Ok(())
    }

    /// Flushes every partition and waits until all of it is written.
    pub fn flush_all(&mut self) -> Result<()> {
        let partitions: Vec<i32> = self.buffers.keys().copied().collect();
        for p in partitions {
            self.flush(p)?;
        }
        // A wait for the disk: other tasks of the runtime go on meanwhile.
        tokio::task::block_in_place(|| self.files.written().wait())
    }
}

/// Makes `partition` of `topic` writable by a new owner: removes what a
/// crash (or an earlier owner, before the rebalance that moved it) left
/// half-written — temporary files, and files of the other tables beyond
/// the marker table `ledger_events` — and returns the highest offset whose
/// rows are durable. Other partitions are not touched: another instance
/// may be writing them.
pub fn adopt(root: &HistoryRoot, topic: &str, partition: i32) -> Result<Option<i64>> {
    for table in TABLES {
        remove_leftovers(root, table, Some(partition))?;
    }
    let durable = durable_offsets(root, ledger_events::TABLE, topic)?;
    for table in TABLES.iter().filter(|t| **t != ledger_events::TABLE) {
        remove_beyond(root, table, topic, &durable, Some(partition))?;
    }
    Ok(durable.get(&partition).copied())
}

/// The rows of the fact tables an event feeds, from its JSON form `json`:
/// one for a reservation decision, policy or usage record; one per model
/// rate of a price book and per device of an inventory report (at least
/// one, so that every such event has a row).
fn fact_rows(event: &Event, json: &Value) -> Vec<(&'static str, Value)> {
    // The event's own fields with the list `list` replaced by each of its
    // items' fields in turn.
    let per_item = |table: &'static str, list: &str| {
        let mut base = json.clone();
        let items = base
            .as_object_mut()
            .and_then(|o| o.remove(list))
            .and_then(|v| match v {
                Value::Array(items) => Some(items),
                _ => None,
            })
            .unwrap_or_default();
        if items.is_empty() {
            return vec![(table, base)];
        }
        items
            .into_iter()
            .map(|item| {
                let mut row = base.clone();
                if let (Some(row), Value::Object(fields)) = (row.as_object_mut(), item) {
                    row.extend(fields);
                }
                (table, row)
            })
            .collect()
    };
    match &event.body {
        EventBody::ReservationDecision(_) => vec![(reservations::TABLE, json.clone())],
        EventBody::TenantPolicy(_) => vec![(policies::TABLE, json.clone())],
        EventBody::UsageRecord(_) => vec![(usage_records::TABLE, json.clone())],
        EventBody::PriceBook(_) => per_item(price_books::TABLE, "rates"),
        EventBody::NodeInventory(_) => per_item(inventory::TABLE, "devices"),
        _ => Vec::new(),
    }
}

/// Rows in their JSON form into one batch of `schema`; fields the table
/// does not have are ignored, absent ones are null.
pub(super) fn to_batch(schema: SchemaRef, rows: &[Value]) -> Result<RecordBatch> {
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use arrow::array::{Array, AsArray};
    use gpuledger_schemas::samples::one_of_each;

    /// The fact rows of `event` as batches of their tables.
    fn batches_of(event: &Event) -> BTreeMap<&'static str, RecordBatch> {
        let json = event.to_json_value();
        let mut rows: BTreeMap<&'static str, Vec<Value>> = BTreeMap::new();
        for (table, mut row) in fact_rows(event, &json) {
            row["ledger_partition"] = json!(0);
            row["ledger_offset"] = json!(7);
            row["raw"] = Value::String(json.to_string());
            rows.entry(table).or_default().push(row);
        }
        rows.into_iter()
            .map(|(table, rows)| (table, to_batch(schema_of(table).unwrap(), &rows).unwrap()))
            .collect()
    }

    fn text(batch: &RecordBatch, column: &str) -> Vec<Option<String>> {
        let column = batch.column_by_name(column).unwrap().as_string::<i32>();
        (0..column.len())
            .map(|i| column.is_valid(i).then(|| column.value(i).to_owned()))
            .collect()
    }

    #[test]
    fn every_fact_event_fills_its_table() {
        let mut filled = BTreeSet::new();
        for event in one_of_each() {
            for (table, batch) in batches_of(&event) {
                assert!(batch.num_rows() >= 1, "{table}");
                assert_eq!(batch.schema(), schema_of(table).unwrap());
                filled.insert(table);
            }
        }
        let expected: BTreeSet<&str> = TABLES
            .into_iter()
            .filter(|t| ![ledger_events::TABLE, decisions::TABLE, allocations::TABLE].contains(t))
            .collect();
        assert_eq!(filled, expected);
    }

    #[test]
    fn a_book_has_a_row_per_rate_and_keeps_its_decimals_exact() {
        let book = one_of_each()
            .into_iter()
            .find(|e| matches!(&e.body, EventBody::PriceBook(b) if !b.rates.is_empty()))
            .unwrap();
        let EventBody::PriceBook(b) = &book.body else {
            unreachable!()
        };
        let batch = &batches_of(&book)[price_books::TABLE];
        assert_eq!(batch.num_rows(), b.rates.len());
        let models: Vec<Option<String>> = b.rates.iter().map(|r| Some(r.model.clone())).collect();
        assert_eq!(text(batch, "model"), models);
        let rates: Vec<Option<String>> = b
            .rates
            .iter()
            .map(|r| Some(r.quota_per_gpu_hour.to_string()))
            .collect();
        assert_eq!(text(batch, "quota_per_gpu_hour"), rates);
        assert_eq!(
            text(batch, "overhead_pct")[0],
            Some(b.overhead_pct.to_string())
        );
    }

    #[test]
    fn an_inventory_has_a_row_per_device_and_one_for_an_empty_node() {
        let full = one_of_each()
            .into_iter()
            .find(|e| matches!(&e.body, EventBody::NodeInventory(n) if !n.devices.is_empty()))
            .unwrap();
        let EventBody::NodeInventory(n) = &full.body else {
            unreachable!()
        };
        let batch = &batches_of(&full)[inventory::TABLE];
        let uuids: Vec<Option<String>> = n
            .devices
            .iter()
            .map(|d| Some(d.device_uuid.clone()))
            .collect();
        assert_eq!(text(batch, "device_uuid"), uuids);
        assert_eq!(text(batch, "node")[0], Some(n.node.clone()));

        let mut empty = full.clone();
        if let EventBody::NodeInventory(n) = &mut empty.body {
            n.devices.clear();
        }
        let batch = &batches_of(&empty)[inventory::TABLE];
        assert_eq!(text(batch, "device_uuid"), vec![None]);
    }
}
