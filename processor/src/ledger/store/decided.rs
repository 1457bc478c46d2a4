//! Decided admission requests, kept for ever so that a retried request
//! gets its original decision back (DESIGN §4). One is kept per admission
//! request the ledger ever saw, so each is kept small and flat: only what
//! its key (pool, request_id) and the event's fixed parts do not already
//! say, in one row of a table with no heap allocation of its own. Texts
//! that repeat (cluster, tenant, reason) are numbered once; the job and
//! cause ids are stored end to end. A retry, which is rare, rebuilds the
//! decision event field for field.
//!
//! A decision whose envelope does not follow the form the state machine
//! gives its own decisions (a snapshot from another build) is kept whole.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use gpuledger_collections::chunked::Chunked;
use gpuledger_schemas::events::{AdmissionDecision, AdmissionOutcome, HoldKind};
use gpuledger_schemas::{Envelope, Event, EventBody, Rational, Text, Timestamp};

use gpuledger_collections::text_ids::{Absent, TextId, TextIds, TextList};

use crate::ledger::decide::{self, SOURCE};
use gpuledger_collections::by_name::{ByName, same_text};

/// Decided admission requests by pool, then request_id. A snapshot stores
/// a list of ((pool, request_id), decision event) pairs.
#[derive(Debug, Clone, Default)]
pub(crate) struct Decided {
    by_pool: ByName<PoolDecided>,
    /// Cluster, tenant and reason texts, numbered once for every pool.
    texts: FieldTexts,
    /// Job and cause event ids, one after another.
    ids: TextList,
}

/// The texts of a decision's repeating fields, numbered once. Each field
/// takes few values (a cluster, a pool's tenants, a handful of reasons),
/// so the numbers each field took last are tried before the index.
#[derive(Debug, Clone, Default)]
struct FieldTexts {
    ids: TextIds,
    /// Per field, the numbers it took last, the latest first, each with
    /// its text's length (most texts are told apart by it alone).
    recent: [[Option<(TextId, usize)>; RECENT]; 3],
}

/// How many of the numbers a field took last are tried.
const RECENT: usize = 4;

/// A repeating field of a decision.
#[derive(Debug, Clone, Copy)]
enum Field {
    Cluster = 0,
    Tenant = 1,
    Reason = 2,
}

impl FieldTexts {
    /// The number of `text`, the value of `field`, kept now if it was not.
    fn intern(&mut self, field: Field, text: &str) -> TextId {
        let recent = &mut self.recent[field as usize];
        for &(id, len) in recent.iter().flatten() {
            if len == text.len() && same_text(self.ids.get(id), text) {
                return id;
            }
        }
        let id = self.ids.intern(text);
        recent.rotate_right(1);
        recent[0] = Some((id, text.len()));
        id
    }

    fn get(&self, id: TextId) -> &str {
        self.ids.get(id)
    }
}

/// One pool's decided requests: request ids numbered in the order first
/// decided, and each one's decision at its number.
#[derive(Debug, Clone, Default)]
struct PoolDecided {
    requests: TextIds,
    kept: Chunked<Kept>,
}

impl PartialEq for Decided {
    /// Equal when they give the same decision for every request.
    fn eq(&self, other: &Self) -> bool {
        self.by_pool.len() == other.by_pool.len()
            && self.by_pool.iter().all(|(pool, requests)| {
                other.by_pool.get(pool).is_some_and(|theirs| {
                    theirs.kept.len() == requests.kept.len()
                        && requests
                            .requests
                            .iter()
                            .all(|(_, id)| other.get(pool, id) == self.get(pool, id))
                })
            })
    }
}

/// A request looked for among the decided ones.
pub(crate) enum Lookup {
    /// Decided before: the decision as it was made.
    Decided(Arc<Event>),
    /// Not decided yet; [`Decided::insert_absent`] keeps its decision.
    New(Absent),
}

impl Decided {
    /// The decision of `request_id` in `pool`, if it was decided.
    pub(crate) fn get(&self, pool: &str, request_id: &str) -> Option<Arc<Event>> {
        match self.lookup(pool, request_id) {
            Lookup::Decided(decision) => Some(decision),
            Lookup::New(_) => None,
        }
    }

    /// The decision of `request_id` in `pool`, or what keeping one needs.
    pub(crate) fn lookup(&self, pool: &str, request_id: &str) -> Lookup {
        let found = match self.by_pool.get(pool) {
            Some(requests) => requests
                .requests
                .find_or_absent(request_id)
                .map(|id| self.event(&requests.kept[id as usize], pool, request_id)),
            None => Err(Absent::of(request_id)),
        };
        match found {
            Ok(decision) => Lookup::Decided(decision),
            Err(absent) => Lookup::New(absent),
        }
    }

    /// Keeps `decision`, made by this build as the `index`th decision of
    /// its cause, the answer to `request_id` in `pool`, found `absent` by
    /// [`Decided::lookup`] (no second probe, and its id is not read back).
    pub(crate) fn insert_absent(
        &mut self,
        pool: &str,
        request_id: &str,
        absent: Absent,
        decision: &Arc<Event>,
        index: u32,
    ) {
        debug_assert_eq!(
            decision.envelope.event_id,
            match &decision.body {
                EventBody::AdmissionDecision(d) =>
                    decide::decision_id(&d.cause_event_id, index as usize, decide::ADMISSION),
                _ => Text::default(),
            },
            "not the state machine's own admission decision"
        );
        let kept = Kept::compact(decision, index, &mut self.texts, &mut self.ids);
        self.keep_in(pool, kept, |requests| {
            requests.insert_absent(absent, request_id)
        });
    }

    /// Keeps `kept` in `pool`, numbered by `number`, which numbers the
    /// request id there.
    fn keep_in(&mut self, pool: &str, kept: Kept, number: impl FnOnce(&mut TextIds) -> TextId) {
        // Looked up once where the pool is known, which is nearly always.
        let requests = self.by_pool.get_or_insert_with(pool, PoolDecided::default);
        let id = number(&mut requests.requests) as usize;
        if id == requests.kept.len() {
            requests.kept.push(kept);
        } else {
            requests.kept[id] = kept;
        }
    }

    /// Keeps `decision`, the answer to `request_id` in `pool`.
    pub(crate) fn insert(&mut self, pool: &str, request_id: &str, decision: &Arc<Event>) {
        self.keep(pool, request_id, decision);
    }

    fn keep(&mut self, pool: &str, request_id: &str, decision: &Arc<Event>) {
        let kept = Kept::of(decision, &mut self.texts, &mut self.ids);
        self.keep_in(pool, kept, |requests| requests.intern(request_id));
    }

    /// The decision event `kept` stands for, as it was made.
    fn event(&self, kept: &Kept, pool: &str, request_id: &str) -> Arc<Event> {
        let c = match kept {
            Kept::Whole(event) => return Arc::clone(event),
            Kept::Compact(c) => c,
        };
        let cause_event_id = self.ids.get(c.cause_event_id);
        let envelope = Envelope {
            event_id: decide::decision_id(cause_event_id, c.index as usize, decide::ADMISSION),
            event_time: c.event_time,
            source: decide::source(),
            cluster: self.texts.get(c.cluster).into(),
        };
        let body = AdmissionDecision {
            pool: pool.into(),
            request_id: request_id.into(),
            job_id: self.ids.get(c.job_id).into(),
            attempt: c.attempt,
            tenant: self.texts.get(c.tenant).into(),
            slices: c.slices,
            max_slices: c.max_slices,
            decision: c.decision,
            kind: c.kind,
            reason: self.texts.get(c.reason).into(),
            entitled_ge: exact(c.entitled_ge),
            used_ge: exact(c.used_ge),
            ledger_partition: c.ledger_partition,
            ledger_offset: c.ledger_offset,
            cause_event_id: cause_event_id.into(),
        };
        Arc::new(Event::new(envelope, body))
    }
}

/// One decision as kept.
#[derive(Debug, Clone)]
enum Kept {
    Compact(Compact),
    /// Not in the state machine's own form: the event itself.
    Whole(Arc<Event>),
}

/// An admission decision without its pool, request_id, source and id
/// (`{cause_event_id}/{index}/admission`); its texts by number.
#[derive(Debug, Clone)]
struct Compact {
    index: u32,
    event_time: Timestamp,
    /// In `Decided::texts`.
    cluster: TextId,
    tenant: TextId,
    reason: TextId,
    /// In `Decided::ids`.
    job_id: TextId,
    cause_event_id: TextId,
    attempt: i32,
    slices: i32,
    max_slices: i32,
    decision: AdmissionOutcome,
    kind: Option<HoldKind>,
    /// Numerator and denominator, in lowest terms.
    entitled_ge: (i64, i64),
    used_ge: (i64, i64),
    ledger_partition: i32,
    ledger_offset: i64,
}

impl Kept {
    fn of(event: &Arc<Event>, texts: &mut FieldTexts, ids: &mut TextList) -> Kept {
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
        Kept::compact(event, index, texts, ids)
    }

    /// `event`, an admission decision in the state machine's own form, the
    /// `index`th of its cause, kept compact.
    fn compact(event: &Arc<Event>, index: u32, texts: &mut FieldTexts, ids: &mut TextList) -> Kept {
        let EventBody::AdmissionDecision(d) = &event.body else {
            return Kept::Whole(Arc::clone(event));
        };
        // GE amounts are kept as two integers where they fit (always, for
        // the state machine's own), the event whole where not.
        let (Some(entitled_ge), Some(used_ge)) =
            (d.entitled_ge.to_i64_pair(), d.used_ge.to_i64_pair())
        else {
            return Kept::Whole(Arc::clone(event));
        };
        let envelope = &event.envelope;
        Kept::Compact(Compact {
            index,
            event_time: envelope.event_time,
            cluster: texts.intern(Field::Cluster, &envelope.cluster),
            tenant: texts.intern(Field::Tenant, &d.tenant),
            reason: texts.intern(Field::Reason, &d.reason),
            job_id: ids.push(&d.job_id),
            cause_event_id: ids.push(&d.cause_event_id),
            attempt: d.attempt,
            slices: d.slices,
            max_slices: d.max_slices,
            decision: d.decision,
            kind: d.kind,
            entitled_ge,
            used_ge,
            ledger_partition: d.ledger_partition,
            ledger_offset: d.ledger_offset,
        })
    }
}

/// A kept GE amount as the rational it was.
fn exact((numerator, denominator): (i64, i64)) -> Rational {
    Rational::from_lowest_terms(numerator, denominator)
}

/// `text` as a decision's index, where writing the index back gives the
/// same text (no sign, no leading zero).
fn canonical_index(text: &str) -> Option<u32> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let canonical = digits && (text == "0" || !text.starts_with('0'));
    text.parse().ok().filter(|_| canonical)
}

impl Serialize for Decided {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.by_pool.iter().flat_map(|(pool, requests)| {
            let mut sorted: Vec<_> = requests.requests.iter().collect();
            sorted.sort_unstable_by(|a, b| a.1.cmp(b.1));
            sorted.into_iter().map(move |(n, id)| {
                let kept = &requests.kept[n as usize];
                ((pool, id), Written(self.event(kept, pool, id)))
            })
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
            let requests = decided.by_pool.get("p").expect("the pool's requests");
            let kept = &requests.kept[requests.requests.find("r1").unwrap() as usize];
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

    #[test]
    fn a_field_text_keeps_one_number_however_it_alternates() {
        let mut texts = FieldTexts::default();
        // More values than are tried first, two of the same length.
        let values = ["ab", "ba", "quota_exceeded", "burst", "within_quota", "x"];
        let first: Vec<TextId> = values
            .iter()
            .map(|v| texts.intern(Field::Reason, v))
            .collect();
        for round in 0..3 {
            for (i, v) in values.iter().enumerate().rev() {
                assert_eq!(
                    texts.intern(Field::Reason, v),
                    first[i],
                    "{v} in round {round}"
                );
                assert_eq!(texts.get(first[i]), *v);
            }
        }
        // Another field shares the numbers of the same texts.
        assert_eq!(texts.intern(Field::Tenant, "ba"), first[1]);
    }

    #[test]
    fn a_decision_kept_again_replaces_the_first_and_order_does_not_matter() {
        // The same decision, answering r1 and then r2, and a later one.
        let of = |request: &str, offset: &str| {
            let text = serde_json::to_string(&*decision("e-42/0/admission", SOURCE)).unwrap();
            let text = text.replace(r#""r1""#, &format!("{request:?}"));
            Arc::new(Event::from_json_str(&text.replace(":42,", &format!(":{offset},"))).unwrap())
        };
        let (r1, r2, r1_again) = (of("r1", "42"), of("r2", "42"), of("r1", "43"));
        let mut a = Decided::default();
        a.insert("p", "r1", &r1);
        a.insert("p", "r2", &r2);
        a.insert("p", "r1", &r1_again);
        assert_eq!(a.get("p", "r1").as_deref(), Some(&*r1_again));
        assert_eq!(a.get("p", "r2").as_deref(), Some(&*r2));

        let mut b = Decided::default();
        b.insert("p", "r2", &r2);
        b.insert("p", "r1", &r1_again);
        assert_eq!(a, b);
        b.insert("p", "r1", &r1);
        assert_ne!(a, b);
        b.insert("p", "r1", &r1_again);
        b.insert("q", "r1", &r1);
        assert_ne!(a, b);
    }
}
