//! Decided admission requests, kept for ever so that a retried request
//! gets its original decision back (DESIGN §4). One is kept per admission
//! request the ledger ever saw, so each is kept small: only what its key
//! (pool, request_id) and the event's fixed parts do not already say, with
//! the texts that repeat (tenant, cluster, reason) shared. A retry, which
//! is rare, rebuilds the decision event field for field.
//!
//! A decision whose envelope does not follow the form the state machine
//! gives its own decisions (a snapshot from another build) is kept whole.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashSet;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use gpuledger_schemas::events::{AdmissionDecision, AdmissionOutcome, HoldKind};
use gpuledger_schemas::{Envelope, Event, EventBody, Rational, Timestamp};

use super::by_text::ByText;
use super::decide::{self, SOURCE};

/// Decided admission requests by pool, then request_id. A snapshot stores
/// a list of ((pool, request_id), decision event) pairs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Decided {
    by_pool: BTreeMap<String, ByText<Kept>>,
    texts: Texts,
}

impl PartialEq for Decided {
    fn eq(&self, other: &Self) -> bool {
        self.by_pool == other.by_pool
    }
}

impl Decided {
    /// The decision of `request_id` in `pool`, if it was decided.
    pub(crate) fn get(&self, pool: &str, request_id: &str) -> Option<Arc<Event>> {
        let kept = self.by_pool.get(pool)?.get(request_id)?;
        Some(kept.event(pool, request_id))
    }

    /// Keeps `decision`, the answer to `request_id` in `pool`.
    pub(crate) fn insert(&mut self, pool: &str, request_id: &str, decision: &Arc<Event>) {
        self.keep(pool, request_id, decision, false);
    }

    /// Keeps `decision`, the answer to `request_id` in `pool`, which was
    /// not decided before (one probe fewer).
    pub(crate) fn insert_new(&mut self, pool: &str, request_id: &str, decision: &Arc<Event>) {
        self.keep(pool, request_id, decision, true);
    }

    fn keep(&mut self, pool: &str, request_id: &str, decision: &Arc<Event>, new: bool) {
        let kept = Kept::of(decision, &mut self.texts);
        let requests = match self.by_pool.get_mut(pool) {
            Some(requests) => requests,
            None => self.by_pool.entry(pool.to_owned()).or_default(),
        };
        if new {
            requests.insert_new(request_id, kept);
        } else {
            requests.insert(request_id, kept);
        }
    }
}

/// One decision as kept.
#[derive(Debug, Clone, PartialEq)]
enum Kept {
    Compact(Box<Compact>),
    /// Not in the state machine's own form: the event itself.
    Whole(Arc<Event>),
}

/// An admission decision without its pool, request_id, source and id
/// (`{cause_event_id}/{index}/admission`).
#[derive(Debug, Clone, PartialEq)]
struct Compact {
    index: u32,
    event_time: Timestamp,
    cluster: Arc<str>,
    job_id: Box<str>,
    attempt: i32,
    tenant: Arc<str>,
    slices: i32,
    max_slices: i32,
    decision: AdmissionOutcome,
    kind: Option<HoldKind>,
    reason: Arc<str>,
    entitled_ge: Rational,
    used_ge: Rational,
    ledger_partition: i32,
    ledger_offset: i64,
    cause_event_id: Box<str>,
}

impl Kept {
    fn of(event: &Arc<Event>, texts: &mut Texts) -> Kept {
        let EventBody::AdmissionDecision(d) = &event.body else {
            return Kept::Whole(Arc::clone(event));
        };
        let envelope = &event.envelope;
        let index = envelope
            .event_id
            .strip_prefix(d.cause_event_id.as_str())
            .and_then(|rest| rest.strip_prefix('/'))
            .and_then(|rest| rest.strip_suffix(decide::ADMISSION))
            .and_then(|rest| rest.strip_suffix('/'))
            .and_then(canonical_index);
        let Some(index) = index.filter(|_| envelope.source == SOURCE) else {
            return Kept::Whole(Arc::clone(event));
        };
        Kept::Compact(Box::new(Compact {
            index,
            event_time: envelope.event_time,
            cluster: texts.share(&envelope.cluster),
            job_id: d.job_id.as_str().into(),
            attempt: d.attempt,
            tenant: texts.share(&d.tenant),
            slices: d.slices,
            max_slices: d.max_slices,
            decision: d.decision,
            kind: d.kind,
            reason: texts.share(&d.reason),
            entitled_ge: d.entitled_ge.clone(),
            used_ge: d.used_ge.clone(),
            ledger_partition: d.ledger_partition,
            ledger_offset: d.ledger_offset,
            cause_event_id: d.cause_event_id.as_str().into(),
        }))
    }

    /// The decision event, as it was made.
    fn event(&self, pool: &str, request_id: &str) -> Arc<Event> {
        let c = match self {
            Kept::Whole(event) => return Arc::clone(event),
            Kept::Compact(c) => c,
        };
        let envelope = Envelope {
            event_id: decide::decision_id(&c.cause_event_id, c.index as usize, decide::ADMISSION),
            event_time: c.event_time,
            source: SOURCE.to_owned(),
            cluster: c.cluster.to_string(),
        };
        let body = AdmissionDecision {
            pool: pool.to_owned(),
            request_id: request_id.to_owned(),
            job_id: c.job_id.to_string(),
            attempt: c.attempt,
            tenant: c.tenant.to_string(),
            slices: c.slices,
            max_slices: c.max_slices,
            decision: c.decision,
            kind: c.kind,
            reason: c.reason.to_string(),
            entitled_ge: c.entitled_ge.clone(),
            used_ge: c.used_ge.clone(),
            ledger_partition: c.ledger_partition,
            ledger_offset: c.ledger_offset,
            cause_event_id: c.cause_event_id.to_string(),
        };
        Arc::new(Event::new(envelope, body))
    }
}

/// `text` as a decision's index, where writing the index back gives the
/// same text (no sign, no leading zero).
fn canonical_index(text: &str) -> Option<u32> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let canonical = digits && (text == "0" || !text.starts_with('0'));
    text.parse().ok().filter(|_| canonical)
}

/// Texts that repeat across decisions, each stored once.
#[derive(Debug, Clone, Default)]
struct Texts(FxHashSet<Arc<str>>);

impl Texts {
    fn share(&mut self, text: &str) -> Arc<str> {
        if let Some(known) = self.0.get(text) {
            return Arc::clone(known);
        }
        let shared: Arc<str> = text.into();
        self.0.insert(Arc::clone(&shared));
        shared
    }
}

impl Serialize for Decided {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.by_pool.iter().flat_map(|(pool, requests)| {
            let mut sorted: Vec<_> = requests.iter().collect();
            sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
            sorted
                .into_iter()
                .map(move |(id, kept)| ((pool, id), Written(kept.event(pool, id))))
        }))
    }
}

/// A decision event as a snapshot writes it.
struct Written(Arc<Event>);

impl Serialize for Written {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Decided {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut decided = Decided::default();
        for ((pool, id), decision) in Vec::<((String, String), Event)>::deserialize(d)? {
            decided.insert(&pool, &id, &Arc::new(decision));
        }
        Ok(decided)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(event_id: &str, source: &str) -> Arc<Event> {
        let text = format!(
            r#"{{"type":"AdmissionDecision","event_id":"{event_id}","event_time":"2026-11-01T00:00:00Z","source":"{source}","cluster":"c1","pool":"p","request_id":"r1","job_id":"j1","attempt":2,"tenant":"t","slices":3,"max_slices":7,"decision":"admit","kind":"quota","reason":"within_quota","entitled_ge":"4","used_ge":"1/7","ledger_partition":1,"ledger_offset":42,"cause_event_id":"e-42"}}"#
        );
        Arc::new(Event::from_json_str(&text).unwrap())
    }

    #[test]
    fn a_kept_decision_comes_back_as_it_was_made() {
        for (id, source, compact) in [
            ("e-42/0/admission", SOURCE, true),
            ("e-42/3/admission", SOURCE, true),
            // Not the state machine's own form: kept whole.
            ("e-42/03/admission", SOURCE, false),
            ("e-42/+3/admission", SOURCE, false),
            ("e-42//admission", SOURCE, false),
            ("other", SOURCE, false),
            ("e-42/0/admission", "elsewhere", false),
        ] {
            let original = decision(id, source);
            let mut decided = Decided::default();
            decided.insert("p", "r1", &original);
            let kept = decided.by_pool["p"].get("r1").unwrap();
            assert_eq!(
                matches!(kept, Kept::Compact(_)),
                compact,
                "{id} from {source}"
            );
            assert_eq!(decided.get("p", "r1").as_deref(), Some(&*original), "{id}");
            assert_eq!(decided.get("p", "r2"), None);

            let text = serde_json::to_string(&decided).unwrap();
            let back: Decided = serde_json::from_str(&text).unwrap();
            assert_eq!(back, decided);
            assert_eq!(back.get("p", "r1").as_deref(), Some(&*original));
        }
    }
}
