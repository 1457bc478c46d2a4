//! A pool's billing segments, each with the price last worked out for it.
//!
//! Budgets price a tenant's month again and again as it goes on. A closed
//! segment's compute and health credit over the same span change only
//! when a price book, inventory or health report arrives, and each of
//! those starts a new generation of the facts; so a segment remembers its
//! last price together with the generation and span it was worked out for.
//!
//! Even remembered prices cost an addition per segment, and a month holds
//! many. So each tenant also keeps a running total of its settled rows
//! (closed by the end of the span asked for), with the list of rows not in
//! it yet: a budget visits only the rows that closed since it last asked
//! and the running ones, which it prices afresh. The total holds while the
//! generation and the span's start do.

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use rustc_hash::FxBuildHasher;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::exact::Rational;
use crate::pricing::StatementLine;
use crate::time::Timestamp;
use gpuledger_collections::by_name::ByName;
use gpuledger_collections::chunked::Chunked;

use super::facts::Segment;

/// What identifies a segment within its pool and tenant, (job, attempt,
/// start): an open row and the closed row of the same segment share it.
fn key_of(segment: &Segment) -> (&str, i32, Timestamp) {
    (&segment.job_id, segment.attempt, segment.start)
}

/// Whether two rows are of the same segment. The open and the closed row
/// of one segment usually share their job's id: then its text is not read.
fn same_key(a: &Segment, b: &Segment) -> bool {
    a.attempt == b.attempt
        && a.start == b.start
        && (Arc::ptr_eq(&a.job_id, &b.job_id) || a.job_id == b.job_id)
}

fn hash_of(segment: &Segment) -> u64 {
    FxBuildHasher.hash_one(key_of(segment))
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
    /// [`hash_of`] the segment, kept: a growing table hashes every row
    /// again, and would otherwise read every segment's texts to do so.
    hash: u64,
    /// Boxed: most rows are never priced twice, and a month holds many.
    memo: Mutex<Option<Box<Memo>>>,
    /// The running total ([`Settled::epoch`]) this row was added to, if any.
    counted_in: AtomicU64,
}

impl Row {
    fn new(segment: Arc<Segment>, hash: u64) -> Self {
        Self {
            segment,
            hash,
            memo: Mutex::new(None),
            counted_in: AtomicU64::new(0),
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
            *memo = Some(Box::new(Memo {
                generation,
                from,
                to,
                compute: compute.clone(),
                credit: credit.clone(),
            }));
        }
        Ok((compute, credit))
    }
}

/// A copy prices afresh.
impl Clone for Row {
    fn clone(&self) -> Self {
        Self::new(self.segment.clone(), self.hash)
    }
}

/// What a tenant's own figures add up segment by segment: GE ×
/// microseconds held, and the compute and health-credit lines.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Sums {
    pub(super) ge_micros: Rational,
    pub(super) lines: BTreeMap<StatementLine, Rational>,
}

impl Sums {
    /// Adds `amount` to `line`.
    pub(super) fn add(&mut self, line: StatementLine, amount: Rational) {
        super::add(&mut self.lines, line, amount);
    }

    fn merge(&mut self, other: &Sums) {
        self.ge_micros = self.ge_micros.clone() + other.ge_micros.clone();
        for (line, amount) in &other.lines {
            self.add(*line, amount.clone());
        }
    }
}

/// A tenant's running total of settled rows, from `from`, as of a
/// generation of the facts: every row counted ended by `to`.
#[derive(Debug)]
struct Settled {
    /// Marks the rows counted in this total (never 0, never reused).
    epoch: u64,
    generation: u64,
    from: Timestamp,
    to: Timestamp,
    sums: Sums,
    /// Places (in [`TenantRows::rows`]) of every closed row not counted
    /// in `sums`: ended after `to`, or come since; each once. Open rows
    /// are never counted.
    uncounted: Vec<usize>,
}

/// Running totals are told apart by a number drawn once each.
fn next_epoch() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One tenant's segments, found by key (no order: [`TenantRows::sorted`]
/// gives key order), and its running total.
///
/// Open rows are kept apart from closed ones, in their own table. An open
/// row is looked up again when its segment closes, and open rows are few
/// (one per running attempt) while closed rows pile up over a month: a
/// segment that closes then costs one load from memory for the row it
/// replaces, not a chain of them through a month-sized index (the open
/// row's segment is still read once more, to drop it). Closed rows are
/// looked up only by a row that could be of the same segment: one that
/// starts no later than the latest start of a closed row. The ledger
/// never sends one that starts earlier (it opens segments at its current
/// time), so the index of the closed rows is built only when such a row
/// comes.
#[derive(Debug, Default)]
struct TenantRows {
    /// The closed rows, in the order they came; a row replaced keeps its
    /// place.
    rows: Chunked<Row>,
    /// The open rows, by [`hash_of`] their segment.
    open: HashTable<OpenRow>,
    /// The latest start of a closed row, and the places of the closed
    /// rows that start then.
    latest_closed: Option<(Timestamp, Vec<usize>)>,
    /// Places of every closed row, by hash, once needed.
    closed: Option<HashTable<usize>>,
    settled: Mutex<Option<Settled>>,
}

/// An open row, with its segment's key beside it: finding the row when
/// its segment closes then reads nothing of the segment, which was made
/// long before and lies elsewhere in memory.
#[derive(Debug, Clone)]
struct OpenRow {
    row: Row,
    attempt: i32,
    start: Timestamp,
    /// The address of the job's id (kept alive by `row`): a closed row
    /// nearly always shares the text itself.
    job: usize,
}

impl OpenRow {
    fn new(segment: Arc<Segment>, hash: u64) -> Self {
        Self {
            attempt: segment.attempt,
            start: segment.start,
            job: segment.job_id.as_ptr() as usize,
            row: Row::new(segment, hash),
        }
    }

    /// Whether `segment`, of hash `hash`, is of this row's segment.
    fn is_of(&self, hash: u64, segment: &Segment) -> bool {
        self.row.hash == hash
            && self.attempt == segment.attempt
            && self.start == segment.start
            && (self.job == segment.job_id.as_ptr() as usize
                || self.row.segment.job_id == segment.job_id)
    }
}

impl TenantRows {
    /// Takes in a row: it replaces the row of the same segment, unless that
    /// one is closed and this one open.
    fn insert(&mut self, segment: Arc<Segment>) {
        let hash = hash_of(&segment);
        if segment.end.is_none() {
            if self.find_closed(hash, &segment).is_some() {
                return;
            }
            // One probe, whether it replaces an open row or comes new.
            let entry = self.open.entry(
                hash,
                |open| open.is_of(hash, &segment),
                |open| open.row.hash,
            );
            match entry {
                Entry::Occupied(mut known) => *known.get_mut() = OpenRow::new(segment, hash),
                Entry::Vacant(place) => {
                    place.insert(OpenRow::new(segment, hash));
                }
            }
            return;
        }
        if let Ok(open) = self
            .open
            .find_entry(hash, |open| open.is_of(hash, &segment))
        {
            open.remove();
        } else if let Some(place) = self.find_closed(hash, &segment) {
            // The row replaced may be counted in the total.
            self.rows[place] = Row::new(segment, hash);
            self.forget_total();
            return;
        }
        let place = self.rows.len();
        self.rows.push(Row::new(segment, hash));
        self.note_closed(place);
        if let Ok(Some(total)) = self.settled.get_mut() {
            total.uncounted.push(place);
        }
    }

    /// The place of the closed row of `segment`'s segment (whose hash is
    /// `hash`), if any.
    fn find_closed(&mut self, hash: u64, segment: &Segment) -> Option<usize> {
        let (latest, at_latest) = self.latest_closed.as_ref()?;
        let rows = &self.rows;
        // The kept hash first: a row's segment and texts lie elsewhere.
        let same = |&i: &usize| rows[i].hash == hash && same_key(&rows[i].segment, segment);
        match segment.start.cmp(latest) {
            std::cmp::Ordering::Greater => None,
            std::cmp::Ordering::Equal => at_latest.iter().copied().find(|i| same(i)),
            std::cmp::Ordering::Less => self
                .closed
                .get_or_insert_with(|| closed_index(rows))
                .find(hash, same)
                .copied(),
        }
    }

    /// The closed row at `place` has just come.
    fn note_closed(&mut self, place: usize) {
        let rows = &self.rows;
        let row = &rows[place];
        if let Some(index) = &mut self.closed {
            index.insert_unique(row.hash, place, |&i| rows[i].hash);
        }
        let start = row.segment.start;
        match &mut self.latest_closed {
            Some((latest, _)) if start < *latest => {}
            Some((latest, at_latest)) if start == *latest => at_latest.push(place),
            _ => self.latest_closed = Some((start, vec![place])),
        }
    }

    /// Every row, closed then open, in no particular order.
    fn all(&self) -> impl Iterator<Item = &Row> {
        self.rows
            .iter()
            .chain(self.open.iter().map(|open| &open.row))
    }

    /// Keeps only the rows `keep` says yes to.
    fn retain(&mut self, mut keep: impl FnMut(&Segment) -> bool) {
        self.rows.retain(|row| keep(&row.segment));
        self.open.retain(|open| keep(&open.row.segment));
        self.latest_closed = None;
        self.closed = None;
        for place in 0..self.rows.len() {
            self.note_closed(place);
        }
        self.forget_total();
    }

    /// The rows in key order.
    fn sorted(&self) -> Vec<&Row> {
        let mut rows: Vec<&Row> = self.all().collect();
        rows.sort_unstable_by(|a, b| key_of(&a.segment).cmp(&key_of(&b.segment)));
        rows
    }

    /// The total no longer holds (a counted row was replaced or removed).
    fn forget_total(&mut self) {
        if let Ok(settled) = self.settled.get_mut() {
            *settled = None;
        }
    }
}

/// Places of `rows` (all closed), by hash.
fn closed_index(rows: &Chunked<Row>) -> HashTable<usize> {
    let mut index = HashTable::with_capacity(rows.len());
    for (place, row) in rows.iter().enumerate() {
        index.insert_unique(row.hash, place, |&i| rows[i].hash);
    }
    index
}

/// A copy keeps no running total and prices afresh.
impl Clone for TenantRows {
    fn clone(&self) -> Self {
        Self {
            rows: self.rows.clone(),
            open: self.open.clone(),
            latest_closed: self.latest_closed.clone(),
            closed: self.closed.clone(),
            settled: Mutex::new(None),
        }
    }
}

/// A pool's segments by tenant, then by key: a tenant's own figures
/// (budgets) read only that tenant's rows. A snapshot stores the segments
/// as a list.
#[derive(Debug, Clone, Default)]
pub(super) struct Segments(ByName<TenantRows>);

impl Segments {
    /// Takes in one row of `allocations`. A closed row replaces the open
    /// row of the same segment; an open row never replaces a closed one.
    pub(super) fn insert(&mut self, segment: Arc<Segment>) {
        let tenant = self
            .0
            .get_or_insert_with(&segment.tenant, TenantRows::default);
        tenant.insert(segment);
    }

    /// Keeps only the segments `keep` says yes to.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&Segment) -> bool) {
        for tenant in self.0.values_mut() {
            tenant.retain(&mut keep);
        }
        self.0.retain(|_, tenant| tenant.all().next().is_some());
    }

    /// Every segment, by tenant and key.
    pub(super) fn values(&self) -> impl Iterator<Item = &Segment> {
        self.rows().map(|row| &*row.segment)
    }

    /// Every segment with its last price, by tenant and key.
    pub(super) fn rows(&self) -> impl Iterator<Item = &Row> {
        self.0.values().flat_map(TenantRows::sorted)
    }

    /// `tenant`'s segments, in no particular order.
    pub(super) fn values_of<'s>(&'s self, tenant: &str) -> impl Iterator<Item = &'s Segment> {
        self.0
            .get(tenant)
            .into_iter()
            .flat_map(|t| t.all().map(|row| &*row.segment))
    }

    /// `tenant`'s sums over [from, to) as of `generation`, rows priced by
    /// `pricer`. A row that ended by `to` is added to the tenant's running
    /// total once, the others (open, or ending later) every time; rows
    /// already in the total are not visited.
    pub(super) fn tenant_sums<P: Pricer>(
        &self,
        tenant: &str,
        generation: u64,
        from: Timestamp,
        to: Timestamp,
        pricer: &mut P,
    ) -> Result<Sums, P::Error> {
        let Some(tenant) = self.0.get(tenant) else {
            return Ok(Sums::default());
        };
        let mut running = Sums::default();
        let Ok(mut guard) = tenant.settled.lock() else {
            // Poisoned by a panic elsewhere: add every row up afresh.
            for row in tenant.all() {
                pricer.add(row, &mut running)?;
            }
            pricer.flush(&mut running)?;
            return Ok(running);
        };
        let total = match guard.take() {
            Some(t) if (t.generation, t.from) == (generation, from) && t.to <= to => t,
            _ => Settled {
                epoch: next_epoch(),
                generation,
                from,
                to,
                sums: Sums::default(),
                uncounted: (0..tenant.rows.len()).collect(),
            },
        };
        let total = guard.insert(Settled { to, ..total });
        // The rows settled since first, into the total, then the others.
        let mut still = Vec::with_capacity(total.uncounted.len());
        let mut settle = || {
            for &place in &total.uncounted {
                let Some(row) = tenant.rows.get(place) else {
                    continue;
                };
                if row.segment.end.is_some_and(|end| end > to) {
                    still.push(place);
                } else if row.counted_in.load(Ordering::Relaxed) != total.epoch {
                    pricer.add(row, &mut total.sums)?;
                    row.counted_in.store(total.epoch, Ordering::Relaxed);
                }
            }
            pricer.flush(&mut total.sums)
        };
        if let Err(e) = settle() {
            // Rows may be marked counted that the total lacks: start over.
            *guard = None;
            return Err(e);
        }
        total.uncounted = still;
        let unsettled = total.uncounted.iter().map(|&place| &tenant.rows[place]);
        for row in unsettled.chain(tenant.open.iter().map(|open| &open.row)) {
            pricer.add(row, &mut running)?;
        }
        pricer.flush(&mut running)?;
        running.merge(&total.sums);
        Ok(running)
    }
}

/// How [`Segments::tenant_sums`] prices rows: each as it comes, or some
/// gathered and priced together when flushed.
pub(super) trait Pricer {
    type Error;
    /// Adds `row`'s share to `sums`, or gathers it for the next flush.
    fn add(&mut self, row: &Row, sums: &mut Sums) -> Result<(), Self::Error>;
    /// Adds to `sums` what was gathered since the last flush.
    fn flush(&mut self, sums: &mut Sums) -> Result<(), Self::Error>;
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::billing::UseKind;

    /// A row of tenant `t`, job `j`, attempt 1, starting at `start` and
    /// ending at `end` (seconds), or open.
    fn row(t: u8, j: u8, start: i64, end: Option<i64>) -> Arc<Segment> {
        Arc::new(Segment {
            pool: "p".into(),
            tenant: format!("t{t}").into(),
            job_id: format!("j{j}").into(),
            attempt: 1,
            kind: UseKind::Quota,
            slices: 1,
            max_slices: 1,
            model: "M".into(),
            devices: Arc::new([]),
            start: Timestamp::from_micros(start * 1_000_000),
            end: end.map(|e| Timestamp::from_micros(e * 1_000_000)),
            final_state: None,
            work_units: None,
            work_unit_name: None,
        })
    }

    type Key = (Arc<str>, Arc<str>, Timestamp);

    /// The rule, kept plainly: a row replaces the row of its segment
    /// unless that one is closed and it is open.
    fn model_insert(model: &mut BTreeMap<Key, Arc<Segment>>, s: &Arc<Segment>) {
        let key = (s.tenant.clone(), s.job_id.clone(), s.start);
        match model.get(&key) {
            Some(known) if known.end.is_some() && s.end.is_none() => {}
            _ => {
                model.insert(key, s.clone());
            }
        }
    }

    /// What to do next: take in a row, or keep the rows ending after an
    /// instant (or still open).
    #[derive(Debug, Clone)]
    enum Step {
        Insert(u8, u8, i64, Option<i64>),
        KeepAfter(i64),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            8 => (0..2u8, 0..3u8, 0..6i64, proptest::option::of(0..4i64))
                .prop_map(|(t, j, s, d)| Step::Insert(t, j, s, d.map(|d| s + d))),
            1 => (0..8i64).prop_map(Step::KeepAfter),
        ]
    }

    proptest! {
        /// In any order, closed rows before their open rows and starts
        /// going back and forth, the rows kept are those of the rule.
        #[test]
        fn rows_follow_the_rule_in_any_order(steps in proptest::collection::vec(step(), 0..60)) {
            let mut segments = Segments::default();
            let mut model = BTreeMap::new();
            for step in steps {
                match step {
                    Step::Insert(t, j, start, end) => {
                        let s = row(t, j, start, end);
                        segments.insert(s.clone());
                        model_insert(&mut model, &s);
                    }
                    Step::KeepAfter(at) => {
                        let at = Timestamp::from_micros(at * 1_000_000);
                        let keep = |s: &Segment| s.end.is_none_or(|e| e > at);
                        segments.retain(keep);
                        model.retain(|_, s| keep(s));
                    }
                }
                let got: Vec<&Segment> = segments.values().collect();
                let want: Vec<&Segment> = model.values().map(|s| &**s).collect();
                prop_assert_eq!(got, want);
            }
        }
    }
}
