//! `gpuledger-processor replay`: rebuilds every ledger partition from
//! offset 0 up to the topic's current end, without producing anything, and
//! writes the snapshots a later `run` resumes from. With `--decisions-out`
//! it also writes every decision the rebuild made as NDJSON, for comparing
//! with what the decisions topic holds.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use gpuledger_common::kafka::KafkaArgs;
use gpuledger_schemas::{Codec, Topic};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::ledger::{Ledger, LedgerConfig, Outcome, Position, Rejection};
use crate::ledger_worker::partitions_of;
use crate::progress::Progress;
use crate::snapshot::{self, Snapshot};
use crate::{Error, Result};

/// Settings of a replay.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    pub kafka: KafkaArgs,
    pub ledger: LedgerConfig,
    pub state_dir: PathBuf,
    pub decisions_out: Option<PathBuf>,
}

/// What a replay did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    pub events: u64,
    pub applied: u64,
    pub rejected: u64,
    pub duplicates: u64,
    pub decisions: u64,
}

/// Replays every partition to its end, reporting progress on stderr.
pub fn run(config: &ReplayConfig) -> Result<ReplaySummary> {
    let topic = config.kafka.topic(Topic::Ledger);
    let consumer: BaseConsumer = config
        .kafka
        .client_config(&[
            ("group.id", "gpuledger-replay"),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
        ])?
        .create()?;
    let partitions = partitions_of(&consumer, &topic)?;
    let mut ends = BTreeMap::new();
    // Records each partition holds, transaction markers included: the
    // ledger of each is sized for them once.
    let mut records = BTreeMap::new();
    let mut assignment = TopicPartitionList::new();
    for &p in &partitions {
        let (low, high) = consumer.fetch_watermarks(&topic, p, Duration::from_secs(30))?;
        if high > low {
            ends.insert(p, high);
            records.insert(p, usize::try_from(high - low).unwrap_or(0));
            assignment.add_partition_offset(&topic, p, Offset::Beginning)?;
        }
    }
    let total: i64 = ends.values().sum();
    consumer.assign(&assignment)?;
    let mut out = match &config.decisions_out {
        Some(path) => Some(std::io::BufWriter::new(std::fs::File::create(path)?)),
        None => None,
    };
    let codec = Codec::builtin();
    let mut ledgers: BTreeMap<i32, Ledger> = BTreeMap::new();
    let mut next: BTreeMap<i32, i64> = BTreeMap::new();
    let mut summary = ReplaySummary::default();
    let bar = Progress::new("replaying the ledger", "events", total.max(0) as u64);
    let mut last_report = Instant::now();
    let done = |next: &BTreeMap<i32, i64>| {
        ends.iter()
            .all(|(p, end)| next.get(p).is_some_and(|n| n >= end))
    };
    while !done(&next) {
        let Some(message) = consumer.poll(Duration::from_secs(5)) else {
            return Err(Error::Ledger(format!(
                "replay stalled at {} of {total} records (is the broker reachable?)",
                summary.events
            )));
        };
        let message = message?;
        let partition = message.partition();
        let offset = message.offset();
        next.insert(partition, offset + 1);
        summary.events += 1;
        let ledger = ledgers.entry(partition).or_insert_with(|| {
            let mut ledger = Ledger::new(config.ledger);
            ledger.reserve(records.get(&partition).copied().unwrap_or(0));
            ledger
        });
        let outcome = match codec.decode(message.payload().unwrap_or_default()) {
            Ok(event) => ledger.apply(Position { partition, offset }, &event),
            Err(e) => Outcome::Rejected {
                reason: Rejection::Invalid(e),
            },
        };
        match outcome {
            Outcome::Applied { decisions, .. } => {
                summary.applied += 1;
                summary.decisions += decisions.len() as u64;
                if let Some(out) = out.as_mut() {
                    for d in decisions {
                        writeln!(out, "{}", d.to_json_string())?;
                    }
                }
            }
            Outcome::Rejected { .. } => summary.rejected += 1,
            Outcome::Duplicate => summary.duplicates += 1,
        }
        if last_report.elapsed() >= Duration::from_millis(250) {
            bar.show(summary.events);
            last_report = Instant::now();
        }
    }
    bar.finish(summary.events);
    if let Some(mut out) = out {
        out.flush()?;
    }
    for (partition, ledger) in ledgers {
        let next_offset = next.get(&partition).copied().unwrap_or(0);
        snapshot::save(
            &config.state_dir,
            &Snapshot {
                topic: topic.clone(),
                partition,
                next_offset,
                ledger,
                history: None,
            },
        )?;
    }
    Ok(summary)
}
