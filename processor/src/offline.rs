//! A statement straight from a ledger file, without Kafka, Parquet or the
//! query service: the state machine folds the events in file order (one
//! partition) and the billing module prices what it settled. Finance can
//! recompute a statement independently from an NDJSON export, and tests
//! compare it with what the whole pipeline serves.

use gpuledger_schemas::billing::{self, Facts, Period, Statement};
use gpuledger_schemas::{Event, Timestamp};

use crate::ledger::{Ledger, LedgerConfig, Outcome, Position, Rejection};

/// What folding a ledger gave: the billing facts, the ledger's time, and
/// the events it rejected (line number and reason).
#[derive(Debug)]
pub struct Folded {
    pub facts: Facts,
    pub now: Option<Timestamp>,
    pub rejected: Vec<(usize, Rejection)>,
}

/// Folds `events` in order as one ledger partition.
pub fn fold(events: &[Event], config: LedgerConfig) -> Result<Folded, String> {
    let mut ledger = Ledger::new(config);
    ledger.reserve(events.len());
    let mut facts = Facts::new();
    let mut rejected = Vec::new();
    for (index, event) in events.iter().enumerate() {
        match ledger.apply(position(index), event) {
            Outcome::Applied {
                decisions,
                segments,
                ..
            } => {
                facts.observe(event).map_err(|e| e.to_string())?;
                for d in &decisions {
                    facts.observe(d).map_err(|e| e.to_string())?;
                }
                for s in segments {
                    facts.segment(s);
                }
            }
            Outcome::Duplicate => {}
            Outcome::Rejected { reason } => rejected.push((index + 1, reason)),
        }
    }
    Ok(Folded {
        facts,
        now: ledger.now(),
        rejected,
    })
}

/// Parses an NDJSON ledger, naming the first line that does not read.
pub fn parse(ndjson: &str) -> Result<Vec<Event>, String> {
    ndjson
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| Event::from_json_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect()
}

/// How fast the state machine alone folds a ledger.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Throughput {
    pub events: usize,
    pub applied: usize,
    pub duplicates: usize,
    pub rejected: usize,
    pub decisions: usize,
    /// Seconds spent parsing the JSON (not part of the rate).
    pub parse_seconds: f64,
    /// Seconds spent in [`Ledger::apply`], from the first event to the last.
    pub fold_seconds: f64,
    pub events_per_second: f64,
    /// Per event type: how many, and the seconds spent applying them,
    /// measured in the second fold (a clock read per event is not part of
    /// `fold_seconds`).
    pub by_type: std::collections::BTreeMap<&'static str, (usize, f64)>,
    /// FNV-1a of every decision's JSON in order: equal digests, equal
    /// decisions.
    pub decisions_digest: String,
}

/// Parses `ndjson`, then times folding every event through one ledger
/// partition, and folds it again untimed to digest the decisions.
pub fn throughput(ndjson: &str, config: LedgerConfig) -> Result<Throughput, String> {
    let parse_started = std::time::Instant::now();
    let events = parse(ndjson)?;
    let parse_seconds = parse_started.elapsed().as_secs_f64();

    // The timed pass: each outcome is counted and dropped, as the runtime
    // drops it once written. Nothing else is measured in it.
    let mut ledger = Ledger::new(config);
    let (mut applied, mut duplicates, mut rejected, mut decisions) = (0, 0, 0, 0);
    let started = std::time::Instant::now();
    ledger.reserve(events.len());
    for (index, event) in events.iter().enumerate() {
        match ledger.apply(position(index), event) {
            Outcome::Applied { decisions: d, .. } => {
                applied += 1;
                decisions += d.len();
            }
            Outcome::Duplicate => duplicates += 1,
            Outcome::Rejected { .. } => rejected += 1,
        }
    }
    let fold_seconds = started.elapsed().as_secs_f64();
    drop(ledger);

    // An untimed second fold digests the decisions (the state machine is
    // deterministic: the same events give the same decisions) and times
    // each event type apart, which costs a clock read per event.
    let mut ledger = Ledger::new(config);
    ledger.reserve(events.len());
    let mut digest = Fnv1a::default();
    let mut by_type = std::collections::BTreeMap::<&'static str, (usize, f64)>::new();
    for (index, event) in events.iter().enumerate() {
        let before = std::time::Instant::now();
        let outcome = ledger.apply(position(index), event);
        let spent = before.elapsed().as_secs_f64();
        let entry = by_type.entry(event.event_type().name()).or_default();
        entry.0 += 1;
        entry.1 += spent;
        if let Outcome::Applied { decisions, .. } = outcome {
            for d in &decisions {
                digest.write(d.to_json_string().as_bytes());
                digest.write(b"\n");
            }
        }
    }
    let report = Throughput {
        events: events.len(),
        applied,
        duplicates,
        rejected,
        decisions,
        parse_seconds,
        fold_seconds,
        events_per_second: events.len() as f64 / fold_seconds.max(f64::MIN_POSITIVE),
        by_type,
        decisions_digest: format!("{:016x}", digest.0),
    };
    Ok(report)
}

/// Where the `index`th event of a one-partition ledger file sits.
fn position(index: usize) -> Position {
    Position {
        partition: 0,
        offset: index as i64,
    }
}

/// The 64-bit FNV-1a hash: small, stable across builds and platforms.
struct Fnv1a(u64);

impl Default for Fnv1a {
    fn default() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv1a {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// The statement of `period` from an NDJSON ledger.
pub fn statement(ndjson: &str, period: Period, config: LedgerConfig) -> Result<Statement, String> {
    let events = parse(ndjson)?;
    let folded = fold(&events, config)?;
    let now = folded.now.unwrap_or(period.start());
    billing::statement(&folded.facts, period, now).map_err(|e| e.to_string())
}
