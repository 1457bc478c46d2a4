//! What statements are computed from, gathered from the ledger's history.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::events::{
    DeviceHealth, HealthState, InventoryDevice, JobState, NodeInventory, ReservationDecision,
    ReservationOutcome, UsageRecord,
};
use crate::exact::{Decimal, Rational};
use crate::pricing::{GpuUsage, PriceBooks, RateKind};
use crate::time::Timestamp;
use crate::{Event, EventBody};

use gpuledger_collections::by_name::ByName;

use super::BillingError;
use super::segments::Segments;

symbols! {
    /// How a billing segment is priced: by its admission's kind, or
    /// `unadmitted` (on-demand rate, billed under `compute_burst`).
    pub enum UseKind {
        Reserved = "reserved",
        Quota = "quota",
        Burst = "burst",
        Unadmitted = "unadmitted",
    }
}

impl UseKind {
    /// The rate it is priced at.
    pub fn rate_kind(self) -> RateKind {
        match self {
            UseKind::Reserved => RateKind::Reserved,
            UseKind::Quota => RateKind::Quota,
            UseKind::Burst | UseKind::Unadmitted => RateKind::OnDemand,
        }
    }
}

impl From<crate::events::HoldKind> for UseKind {
    fn from(kind: crate::events::HoldKind) -> Self {
        match kind {
            crate::events::HoldKind::Reserved => UseKind::Reserved,
            crate::events::HoldKind::Quota => UseKind::Quota,
            crate::events::HoldKind::Burst => UseKind::Burst,
        }
    }
}

/// One billing segment of an allocation (DESIGN §5, §6 `allocations`): an
/// attempt's hold at one kind over [start, end). The ledger splits an
/// allocation into segments where its kind changes; price-book changes are
/// split at statement time. `end` is `None` while the segment is open.
///
/// The texts are shared (`Arc`): the ledger reports each segment twice,
/// open and closed, and its pool, tenant, job, model and devices are the
/// same texts its state holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Segment {
    pub pool: Arc<str>,
    pub tenant: Arc<str>,
    pub job_id: Arc<str>,
    pub attempt: i32,
    pub kind: UseKind,
    /// GE held: `slices / max_slices`.
    pub slices: i64,
    pub max_slices: i64,
    /// The pool's GPU model.
    pub model: Arc<str>,
    /// The devices named by the attempt's `started` events.
    pub devices: Arc<[Arc<str>]>,
    pub start: Timestamp,
    pub end: Option<Timestamp>,
    /// Set on the attempt's last segment, closed by its terminal event.
    pub final_state: Option<JobState>,
    pub work_units: Option<Decimal>,
    pub work_unit_name: Option<String>,
}

impl Segment {
    /// The GE it holds.
    pub fn ge(&self) -> Rational {
        Rational::new(self.slices, self.max_slices).unwrap_or_default()
    }

    /// The part of the segment inside [from, to), an open segment running
    /// up to `to`; `None` when nothing of it is inside.
    pub fn within(&self, from: Timestamp, to: Timestamp) -> Option<(Timestamp, Timestamp)> {
        let (a, b) = (self.start.max(from), self.end.unwrap_or(to).min(to));
        (a < b).then_some((a, b))
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptEnd {
    pub tenant: String,
    pub job_id: String,
    pub attempt: i32,
    pub state: JobState,
    pub at: Timestamp,
    pub work_units: Option<Decimal>,
    pub work_unit_name: Option<String>,
}

/// A confirmed reservation's window as the ledger decided it; a cancel ends
/// it early.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReservedWindow {
    pub tenant: String,
    pub ge: Rational,
    pub start: Timestamp,
    pub end: Timestamp,
}

/// One pool's timelines.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(super) struct PoolFacts {
    pub(super) segments: Segments,
    pub(super) reservations: BTreeMap<String, ReservedWindow>,
    /// Node inventories in time order.
    pub(super) inventory: Vec<(Timestamp, String, Vec<InventoryDevice>)>,
    /// Health changes per device, in time order.
    pub(super) health: BTreeMap<String, Vec<(Timestamp, HealthState)>>,
    /// What the GPUs reported, if telemetry was given.
    #[serde(default)]
    pub(super) telemetry: Telemetry,
}

/// What a pool's samples say that statements price: energy and idle time.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Telemetry {
    /// The first and last sample time seen: the span with telemetry.
    pub(super) span: Option<(Timestamp, Timestamp)>,
    pub(super) energy: Vec<EnergyUse>,
    pub(super) idle: Vec<IdleStretch>,
    pub(super) hours: Vec<DeviceHour>,
}

/// Energy a device used over a sample's interval: the delta of its GPU's
/// counter, of which `slices/max_slices` is the device's.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct EnergyUse {
    pub device_uuid: String,
    /// The sample's time (the end of the interval the delta covers).
    pub at: Timestamp,
    pub delta_mj: i64,
    pub slices: i64,
    pub max_slices: i64,
}

/// A stretch [from, to) in which a device's SM activity was known and
/// below 5 %.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IdleStretch {
    pub device_uuid: String,
    pub from: Timestamp,
    pub to: Timestamp,
    pub slices: i64,
    pub max_slices: i64,
}

/// A device's samples of one hour, summed: what the `device_hourly`
/// roll-up gives. Only taken in where one holder (or none) and one price
/// book cover the whole span, inside one month (see
/// [`Holders::settles_whole`](super::Holders::settles_whole)); there the sums price exactly as the samples
/// they came from would.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceHour {
    pub device_uuid: String,
    /// Every sample's interval lies in [from, to).
    pub from: Timestamp,
    pub to: Timestamp,
    /// The first and last sample time.
    pub first_sample: Timestamp,
    pub last_sample: Timestamp,
    /// Time whose SM activity was known and below 5 %.
    pub idle_micros: i64,
    /// The energy deltas of the samples, summed.
    pub energy_mj: i64,
    pub slices: i64,
    pub max_slices: i64,
}

/// Everything statements are computed from.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Facts {
    books: PriceBooks,
    pools: ByName<PoolFacts>,
    usage: Vec<UsageRecord>,
    /// Tenants with a policy, and since when.
    tenants: BTreeMap<String, Timestamp>,
    /// Bumped whenever a price book, inventory or health report arrives
    /// (or months are forgotten): a segment's remembered price holds only
    /// for the generation it was worked out in.
    #[serde(skip)]
    generation: Generation,
}

/// A count that only tags remembered prices: two facts that hold the same
/// events are equal whatever their counts.
#[derive(Debug, Clone, Copy, Default)]
struct Generation(u64);

impl PartialEq for Generation {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Generation {
    fn bump(&mut self) {
        self.0 += 1;
    }
}

impl Facts {
    /// No facts.
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes in a ledger event that sizes or prices the pools; other events
    /// are ignored. A price book that conflicts with one already known is
    /// an error.
    pub fn observe(&mut self, event: &Event) -> Result<(), BillingError> {
        let at = event.envelope.event_time;
        if matches!(
            event.body,
            EventBody::PriceBook(_) | EventBody::NodeInventory(_) | EventBody::DeviceHealth(_)
        ) {
            self.generation.bump();
        }
        match &event.body {
            EventBody::PriceBook(book) => self.books.insert(book.clone())?,
            EventBody::NodeInventory(inv) => self.inventory(inv, at),
            EventBody::DeviceHealth(h) => self.health(h, at),
            EventBody::UsageRecord(u) => self.usage.push(u.clone()),
            EventBody::TenantPolicy(p) => {
                let since = self.tenants.entry(p.tenant.clone()).or_insert(at);
                *since = (*since).min(at);
            }
            EventBody::ReservationDecision(d) => self.reservation(d, at),
            _ => {}
        }
        Ok(())
    }

    fn inventory(&mut self, inv: &NodeInventory, at: Timestamp) {
        let pool = self.pools.get_or_insert_with(&inv.pool, PoolFacts::default);
        let i = pool.inventory.partition_point(|(t, _, _)| *t <= at);
        pool.inventory
            .insert(i, (at, inv.node.clone(), inv.devices.clone()));
    }

    fn health(&mut self, h: &DeviceHealth, at: Timestamp) {
        let pool = self.pools.get_or_insert_with(&h.pool, PoolFacts::default);
        let changes = pool.health.entry(h.device_uuid.clone()).or_default();
        let i = changes.partition_point(|(t, _)| *t <= at);
        changes.insert(i, (at, h.state));
    }

    /// A `ReservationDecision`: `confirmed` opens a window, `cancelled` ends
    /// it at the decision's time.
    fn reservation(&mut self, d: &ReservationDecision, at: Timestamp) {
        let pool = self.pools.get_or_insert_with(&d.pool, PoolFacts::default);
        match d.decision {
            ReservationOutcome::Confirmed => {
                pool.reservations.insert(
                    d.reservation_id.clone(),
                    ReservedWindow {
                        tenant: d.tenant.clone().to_string(),
                        ge: Rational::new(d.slices.into(), d.max_slices.into()).unwrap_or_default(),
                        // A start before the decision is taken as the decision's time.
                        start: d.start.max(at),
                        end: d.end,
                    },
                );
            }
            ReservationOutcome::Cancelled => {
                if let Some(window) = pool.reservations.get_mut(&d.reservation_id) {
                    window.end = window.end.min(at).max(window.start);
                }
            }
            ReservationOutcome::Rejected => {}
        }
    }

    /// Notes that `pool` has samples from `first` to `last`: its
    /// statements then carry `idle_allocated`.
    pub fn sampled(&mut self, pool: &str, first: Timestamp, last: Timestamp) {
        let t = &mut self
            .pools
            .get_or_insert_with(pool, PoolFacts::default)
            .telemetry;
        t.span = Some(match t.span {
            Some((a, b)) => (a.min(first), b.max(last)),
            None => (first, last),
        });
    }

    /// Takes in the energy one sample's interval used.
    pub fn energy(&mut self, pool: &str, used: EnergyUse) {
        let pool = self.pools.get_or_insert_with(pool, PoolFacts::default);
        pool.telemetry.energy.push(used);
    }

    /// Takes in one device-hour of rolled-up samples (one that
    /// [`Holders::settles_whole`](super::Holders::settles_whole) accepted).
    pub fn device_hour(&mut self, pool: &str, hour: DeviceHour) {
        let pool = self.pools.get_or_insert_with(pool, PoolFacts::default);
        pool.telemetry.hours.push(hour);
    }

    /// Takes in one idle stretch of a device.
    pub fn idle(&mut self, pool: &str, stretch: IdleStretch) {
        let pool = self.pools.get_or_insert_with(pool, PoolFacts::default);
        pool.telemetry.idle.push(stretch);
    }

    /// Takes in one row of `allocations`. A closed row replaces the open
    /// row of the same segment; an open row never replaces a closed one.
    pub fn segment(&mut self, segment: impl Into<Arc<Segment>>) {
        let segment = segment.into();
        let pool = self
            .pools
            .get_or_insert_with(&segment.pool, PoolFacts::default);
        pool.segments.insert(segment);
    }

    /// Forgets what no longer matters from `from` on: segments, windows
    /// and usage that ended before it, and inventory and health superseded
    /// before it. Month-to-date figures from `from` on are unchanged.
    pub fn forget_before(&mut self, from: Timestamp) {
        self.generation.bump();
        self.usage.retain(|u| u.start >= from);
        for pool in self.pools.values_mut() {
            pool.segments.retain(|s| s.end.is_none_or(|e| e > from));
            pool.reservations.retain(|_, r| r.end > from);
            let mut latest: BTreeMap<&str, Timestamp> = BTreeMap::new();
            for (t, node, _) in &pool.inventory {
                if *t <= from {
                    latest.insert(node, *t);
                }
            }
            let keep: Vec<bool> = pool
                .inventory
                .iter()
                .map(|(t, node, _)| *t > from || latest.get(node.as_str()) == Some(t))
                .collect();
            let mut keep = keep.into_iter();
            pool.inventory.retain(|_| keep.next().unwrap_or(true));
            for changes in pool.health.values_mut() {
                let before = changes.partition_point(|(t, _)| *t <= from);
                if before > 1 {
                    changes.drain(..before - 1);
                }
            }
        }
    }

    /// Every price book.
    pub fn books(&self) -> &PriceBooks {
        &self.books
    }

    /// Every pool with inventory or segments.
    pub fn pools(&self) -> Vec<String> {
        self.pools.keys().map(str::to_owned).collect()
    }

    pub(super) fn pool(&self, name: &str) -> Option<&PoolFacts> {
        self.pools.get(name)
    }

    /// Every usage record.
    pub fn usage_records(&self) -> &[UsageRecord] {
        &self.usage
    }

    /// Tenants known in [from, to): a policy before `to`, or a segment,
    /// reservation window or usage record in the period.
    pub fn tenants_known(&self, from: Timestamp, to: Timestamp) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self
            .tenants
            .iter()
            .filter(|(_, since)| **since < to)
            .map(|(t, _)| t.clone())
            .collect();
        for pool in self.pools.values() {
            for s in pool.segments.values() {
                if s.start < to && s.end.is_none_or(|e| e > from) {
                    out.insert(s.tenant.to_string());
                }
            }
            for r in pool.reservations.values() {
                if r.start < to && r.end > from {
                    out.insert(r.tenant.clone());
                }
            }
        }
        for u in &self.usage {
            if u.start >= from && u.start < to {
                out.insert(u.tenant.clone());
            }
        }
        out
    }

    /// The currency of the latest book in force at `at` (`USD` when none).
    pub fn currency_at(&self, at: Timestamp) -> String {
        self.books
            .books()
            .iter()
            .rev()
            .find(|b| b.effective_from <= at)
            .map_or_else(|| "USD".to_owned(), |b| b.currency.clone())
    }

    /// How each attempt of `pool` ended, for those that did.
    pub fn attempt_ends(&self, pool: &str) -> Vec<AttemptEnd> {
        let Some(pool) = self.pools.get(pool) else {
            return Vec::new();
        };
        pool.segments
            .values()
            .filter_map(|s| {
                Some(AttemptEnd {
                    tenant: s.tenant.to_string(),
                    job_id: s.job_id.to_string(),
                    attempt: s.attempt,
                    state: s.final_state?,
                    at: s.end?,
                    work_units: s.work_units.clone(),
                    work_unit_name: s.work_unit_name.clone(),
                })
            })
            .collect()
    }

    /// The gross compute of every attempt of `jobs` in `pool`, over their
    /// whole life up to `to`, in one pass over the pool's segments.
    pub fn jobs_compute(
        &self,
        pool: &str,
        jobs: &BTreeSet<&str>,
        to: Timestamp,
    ) -> Result<Rational, BillingError> {
        let Some(facts) = self.pools.get(pool) else {
            return Ok(Rational::zero());
        };
        let mut total = Rational::zero();
        let wanted = facts
            .segments
            .values()
            .filter(|s| jobs.contains(&*s.job_id));
        for s in wanted {
            if let Some((a, b)) = s.within(s.start, to) {
                total = total + self.segment_compute(s, a, b)?;
            }
        }
        Ok(total)
    }

    /// Which generation of the facts this is: it changes whenever a closed
    /// segment's price may have changed.
    pub(super) fn generation(&self) -> u64 {
        self.generation.0
    }

    /// The compute amount of `segment` over [from, to) ⊆ its span.
    pub(super) fn segment_compute(
        &self,
        segment: &Segment,
        from: Timestamp,
        to: Timestamp,
    ) -> Result<Rational, BillingError> {
        self.books.compute_cost(&GpuUsage {
            pool: &segment.pool,
            model: &segment.model,
            kind: segment.kind.rate_kind(),
            slices: segment.slices,
            max_slices: segment.max_slices,
            start: from,
            end: to,
        })
    }
}
