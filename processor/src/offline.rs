//! A statement straight from a ledger file, without Kafka, Parquet or the
//! query service: the state machine folds the events in file order (one
//! partition) and the billing module prices what it settled. Finance can
//! recompute a statement independently from an NDJSON export, and tests
//! compare it with what the whole pipeline serves.

use gpuledger_schemas::billing::{self, Facts, Period, Statement};
use gpuledger_schemas::{Event, Timestamp};

use crate::ledger::{Ledger, LedgerConfig, Outcome, Position};

/// What folding a ledger gave: the billing facts, the ledger's time, and
/// the events it rejected (line number and reason).
#[derive(Debug)]
pub struct Folded {
    pub facts: Facts,
    pub now: Option<Timestamp>,
    pub rejected: Vec<(usize, String)>,
}

/// Folds `events` in order as one ledger partition.
pub fn fold(events: &[Event], config: LedgerConfig) -> Result<Folded, String> {
    let mut ledger = Ledger::new(config);
    let mut facts = Facts::new();
    let mut rejected = Vec::new();
    for (index, event) in events.iter().enumerate() {
        let position = Position {
            partition: 0,
            offset: index as i64,
        };
        match ledger.apply(position, event) {
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

/// The statement of `period` from an NDJSON ledger.
pub fn statement(ndjson: &str, period: Period, config: LedgerConfig) -> Result<Statement, String> {
    let events = ndjson
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| Event::from_json_str(l).map_err(|e| format!("line {}: {e}", i + 1)))
        .collect::<Result<Vec<_>, _>>()?;
    let folded = fold(&events, config)?;
    let now = folded.now.unwrap_or(period.start());
    billing::statement(&folded.facts, period, now).map_err(|e| e.to_string())
}
