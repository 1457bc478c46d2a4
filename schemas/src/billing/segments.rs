//! A pool's billing segments, each with the price last worked out for it.
//!
//! Budgets price a tenant's month again and again as it goes on. A closed
//! segment's compute and health credit over the same span change only
//! when a price book, inventory or health report arrives, and each of
//! those starts a new generation of the facts; so a segment remembers its
//! last price together with the generation and span it was worked out for.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::exact::Rational;
use crate::time::Timestamp;

use super::facts::Segment;

/// What identifies a segment within its pool and tenant, (job, attempt,
/// start): an open row and the closed row of the same segment share it.
type SegmentKey = (String, i32, Timestamp);

fn key_of(segment: &Segment) -> SegmentKey {
    (segment.job_id.clone(), segment.attempt, segment.start)
}

/// A price worked out: compute and health credit over [from, to), as of a
/// generation of the facts.
#[derive(Debug)]
struct Memo {
    generation: u64,
    from: Timestamp,
    to: Timestamp,
    compute: Rational,
    credit: Rational,
}

/// One segment and its last price.
#[derive(Debug)]
pub(super) struct Row {
    /// Shared with whoever reported it (the ledger's outcome).
    pub(super) segment: Arc<Segment>,
    memo: Mutex<Option<Memo>>,
}

impl Row {
    fn new(segment: Arc<Segment>) -> Self {
        Self {
            segment,
            memo: Mutex::new(None),
        }
    }

    /// The segment's compute and health credit over [from, to): `price()`,
    /// remembered when the span runs to the segment's end (an open
    /// segment's price grows with time) and reused while `generation`
    /// holds.
    pub(super) fn priced<E>(
        &self,
        generation: u64,
        from: Timestamp,
        to: Timestamp,
        price: impl FnOnce() -> Result<(Rational, Rational), E>,
    ) -> Result<(Rational, Rational), E> {
        let settled = self.segment.end == Some(to);
        if settled
            && let Ok(memo) = self.memo.lock()
            && let Some(m) = memo.as_ref()
            && (m.generation, m.from, m.to) == (generation, from, to)
        {
            return Ok((m.compute.clone(), m.credit.clone()));
        }
        let (compute, credit) = price()?;
        if settled && let Ok(mut memo) = self.memo.lock() {
            *memo = Some(Memo {
                generation,
                from,
                to,
                compute: compute.clone(),
                credit: credit.clone(),
            });
        }
        Ok((compute, credit))
    }
}

/// A copy prices afresh.
impl Clone for Row {
    fn clone(&self) -> Self {
        Self::new(self.segment.clone())
    }
}

/// A pool's segments by tenant, then by key: a tenant's own figures
/// (budgets) read only that tenant's rows. A snapshot stores the segments
/// as a list.
#[derive(Debug, Clone, Default)]
pub(super) struct Segments(BTreeMap<String, BTreeMap<SegmentKey, Row>>);

impl Segments {
    /// Takes in one row of `allocations`. A closed row replaces the open
    /// row of the same segment; an open row never replaces a closed one.
    pub(super) fn insert(&mut self, segment: Arc<Segment>) {
        let rows = match self.0.get_mut(&segment.tenant) {
            Some(rows) => rows,
            None => self.0.entry(segment.tenant.clone()).or_default(),
        };
        let key = key_of(&segment);
        match rows.get_mut(&key) {
            Some(known) if known.segment.end.is_some() && segment.end.is_none() => {}
            Some(known) => *known = Row::new(segment),
            None => {
                rows.insert(key, Row::new(segment));
            }
        }
    }

    /// Keeps only the segments `keep` says yes to.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Segment) -> bool) {
        for rows in self.0.values_mut() {
            rows.retain(|_, row| keep(&row.segment));
        }
        self.0.retain(|_, rows| !rows.is_empty());
    }

    /// Every segment, by tenant and key.
    pub(super) fn values(&self) -> impl Iterator<Item = &Segment> {
        self.rows().map(|row| &*row.segment)
    }

    /// Every segment with its last price, by tenant and key.
    pub(super) fn rows(&self) -> impl Iterator<Item = &Row> {
        self.0.values().flat_map(BTreeMap::values)
    }

    /// `tenant`'s segments with their last prices, in key order; every
    /// tenant's for `None`.
    pub(super) fn rows_of<'s>(
        &'s self,
        tenant: Option<&'s str>,
    ) -> Box<dyn Iterator<Item = &'s Row> + 's> {
        match tenant {
            None => Box::new(self.rows()),
            Some(t) => Box::new(self.0.get(t).into_iter().flat_map(BTreeMap::values)),
        }
    }
}

impl PartialEq for Segments {
    fn eq(&self, other: &Self) -> bool {
        self.values().eq(other.values())
    }
}

impl Serialize for Segments {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.values())
    }
}

impl<'de> Deserialize<'de> for Segments {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut segments = Segments::default();
        for s in Vec::<Segment>::deserialize(d)? {
            segments.insert(Arc::new(s));
        }
        Ok(segments)
    }
}
