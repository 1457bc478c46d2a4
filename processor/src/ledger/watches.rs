//! Budget watches (see `budgets`): how far each budgeted tenant's
//! month-to-date figures are from their next lines, and how fast they can
//! move there at most, so that the month is priced again only when a line
//! could have been reached.

use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use gpuledger_schemas::billing::Segment;
use gpuledger_schemas::pricing::RateKind;
use gpuledger_schemas::{Event, EventBody, Rational, Text, Timestamp};

use gpuledger_collections::by_name::same_text;
use gpuledger_collections::by_text::ByText;

/// Each budgeted tenant's watch, by tenant and pool: looked up by
/// borrowed names for every billing segment that opens or closes, and
/// most tenants have no budget, so the tenant is hashed once and only its
/// few pools compared. A snapshot stores it as a list of ((pool, tenant),
/// watch) pairs in that order.
///
/// Beside them, derived and not stored: an instant before which no
/// budgeted tenant is due to be priced again (see [`Watches::quiet_at`]),
/// so that most events need not look at every tenant's watch.
#[derive(Debug, Clone, Default)]
pub(crate) struct Watches {
    /// A tenant with no watch left has no entry.
    by_tenant: ByText<Vec<(String, Watch)>>,
    /// When `Some(t)`: every budgeted tenant has a watch, and none runs
    /// out before `t`. `None`: not known, look.
    quiet_until: Option<Timestamp>,
}

impl PartialEq for Watches {
    fn eq(&self, other: &Self) -> bool {
        self.sorted() == other.sorted()
    }
}

impl Watches {
    /// `tenant`'s watch in `pool`, if one is kept.
    pub(crate) fn get(&self, pool: &str, tenant: &str) -> Option<&Watch> {
        let pools = self.by_tenant.get(tenant)?;
        pools
            .iter()
            .find(|(p, _)| same_text(p, pool))
            .map(|(_, w)| w)
    }

    fn get_mut(&mut self, pool: &str, tenant: &str) -> Option<&mut Watch> {
        let pools = self.by_tenant.get_mut(tenant)?;
        pools
            .iter_mut()
            .find(|(p, _)| same_text(p, pool))
            .map(|(_, w)| w)
    }

    /// Keeps `watch` for `tenant` in `pool`, or forgets it (`None`).
    pub(crate) fn set(&mut self, pool: &str, tenant: &str, watch: Option<Watch>) {
        match watch {
            Some(watch) => {
                self.lower_quiet(watch.until);
                let pools = self.by_tenant.get_or_insert_with(tenant, Vec::new);
                match pools.iter_mut().find(|(p, _)| same_text(p, pool)) {
                    Some((_, kept)) => *kept = watch,
                    None => pools.push((pool.to_owned(), watch)),
                }
            }
            None => {
                self.quiet_until = None;
                if let Some(pools) = self.by_tenant.get_mut(tenant) {
                    pools.retain(|(p, _)| p != pool);
                    if pools.is_empty() {
                        self.by_tenant.remove(tenant);
                    }
                }
            }
        }
    }

    /// Forgets every watch in `pool`.
    fn forget_pool(&mut self, pool: &str) {
        self.quiet_until = None;
        self.by_tenant.retain(|_, pools| {
            pools.retain(|(p, _)| p != pool);
            !pools.is_empty()
        });
    }

    /// Forgets every watch.
    pub(crate) fn clear(&mut self) {
        self.quiet_until = None;
        self.by_tenant = ByText::default();
    }

    fn is_empty(&self) -> bool {
        self.by_tenant.len() == 0
    }

    /// Every watch by (pool, tenant), in that order.
    fn sorted(&self) -> Vec<((&str, &str), &Watch)> {
        let mut all: Vec<_> = self
            .by_tenant
            .iter()
            .flat_map(|(tenant, pools)| {
                pools
                    .iter()
                    .map(move |(pool, watch)| ((pool.as_str(), tenant), watch))
            })
            .collect();
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// True when no budgeted tenant can be due at `now`: each has a watch
    /// that holds past it.
    pub(crate) fn quiet_at(&self, now: Timestamp) -> bool {
        self.quiet_until.is_some_and(|until| now < until)
    }

    /// After every budgeted tenant was looked at: `until` is the earliest
    /// instant one of their watches runs out, `None` when one has none.
    pub(crate) fn set_quiet_until(&mut self, until: Option<Timestamp>) {
        self.quiet_until = until;
    }

    /// The budgeted tenants may have changed: look again.
    pub(crate) fn forget_quiet(&mut self) {
        self.quiet_until = None;
    }

    /// A watch now runs out at `until`, perhaps earlier than before.
    fn lower_quiet(&mut self, until: Timestamp) {
        if let Some(quiet) = &mut self.quiet_until {
            *quiet = (*quiet).min(until);
        }
    }
}

impl Serialize for Watches {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.sorted())
    }
}

impl<'de> Deserialize<'de> for Watches {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut watches = Watches::default();
        for ((pool, tenant), watch) in Vec::<((String, String), Watch)>::deserialize(d)? {
            watches.set(&pool, &tenant, Some(watch));
        }
        Ok(watches)
    }
}

/// Microseconds in an hour.
const MICROS_PER_HOUR: i128 = gpuledger_schemas::time::MICROS_PER_HOUR as i128;

/// A watch counts in integers of 10⁻¹² of a figure's unit (money or GPU
/// hours), rounded so that it can only run out early, never late: rooms
/// down, rates up. Running out early costs one pricing more; the exact
/// figures decide. An amount too large to count saturates, which ends the
/// watch.
const SCALE: i128 = 1_000_000_000_000;

/// ⌊`r` × SCALE⌋.
fn scaled_down(r: &Rational) -> i128 {
    (r.clone() * Rational::from_i128(SCALE))
        .floor_i128()
        .unwrap_or(if r.is_negative() {
            i128::MIN
        } else {
            i128::MAX
        })
}

/// ⌈`r` × SCALE⌉.
fn scaled_up(r: &Rational) -> i128 {
    scaled_down(&-r.clone()).saturating_neg()
}

/// ⌈`a` × `b` / `c`⌉ for `a`, `b` ≥ 0 and `c` > 0, saturating.
fn mul_div_up(a: i128, b: i128, c: i128) -> i128 {
    a.checked_mul(b).map_or(i128::MAX, |p| {
        let (quotient, remainder) = div_rem(p, c);
        quotient + i128::from(remainder)
    })
}

/// ⌊`a` × `b` / `c`⌋ for `a`, `b` ≥ 0 and `c` > 0, saturating.
fn mul_div_down(a: i128, b: i128, c: i128) -> i128 {
    a.checked_mul(b).map_or(i128::MAX, |p| div_rem(p, c).0)
}

/// `p` / `c`, and whether it leaves a remainder. In 64 bits where both
/// fit, as nearly all do (a rate in [`SCALE`] units times a few slices or
/// an hour's microseconds): a 128-bit division is a call into a library
/// routine many times as long.
fn div_rem(p: i128, c: i128) -> (i128, bool) {
    match (u64::try_from(p), u64::try_from(c)) {
        (Ok(p), Ok(c)) => (i128::from(p / c), p % c != 0),
        _ => (p / c, p % c != 0),
    }
}

/// Microseconds from `from` to `to`, none if negative.
fn micros_between(from: Timestamp, to: Timestamp) -> i128 {
    i128::from(to.as_micros().saturating_sub(from.as_micros()).max(0))
}

/// Per-GE-hour rates by the rate a kind of use is priced at: reserved,
/// quota, on-demand (burst and unadmitted use).
pub(crate) type KindRates<T> = [T; 3];

/// Where `kind`'s rate sits in a [`KindRates`].
pub(crate) fn kind_index(kind: RateKind) -> usize {
    match kind {
        RateKind::Reserved => 0,
        RateKind::Quota => 1,
        RateKind::OnDemand => 2,
    }
}

/// How far one figure (money or GPU hours) is from where a decision could
/// change, as of `Watch::at`, and how fast it may move there at most: in
/// all, and per GE-hour of each kind of use that opens or closes later. A
/// rising figure is below its next line and grows as time passes and
/// segments open; a falling one is at or above its budget and can only
/// come down by health credits on running use, or by a segment closed back
/// in time. All are counted in [`SCALE`] units.
///
/// A segment's rate is its own kind's: the one added when it opens (or
/// counted in `per_hour` when the watch began) is the one taken off when it
/// closes, so the bound stays tight without ever falling below the truth.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Headroom {
    room: i128,
    per_ge_hour: KindRates<i128>,
    per_hour: i128,
    falling: bool,
}

impl Headroom {
    /// `room` left, moving at `per_hour` now; each GE of a kind moves it at
    /// that kind's `per_ge_hour`.
    pub(super) fn new(
        room: &Rational,
        per_ge_hour: &KindRates<Rational>,
        per_hour: &Rational,
        falling: bool,
    ) -> Self {
        Self {
            room: scaled_down(room),
            per_ge_hour: per_ge_hour.each_ref().map(scaled_up),
            per_hour: scaled_up(per_hour),
            falling,
        }
    }

    /// This figure's rate for `ge` GE of `kind`: rounded up, or down.
    fn rate_of(&self, ge: &Rational, kind: RateKind, up: bool) -> i128 {
        let Some((n, d)) = ge.to_i64_pair() else {
            return if up { i128::MAX } else { 0 };
        };
        let n = i128::from(n.max(0));
        let per_ge_hour = self.per_ge_hour[kind_index(kind)];
        if up {
            mul_div_up(per_ge_hour, n, i128::from(d))
        } else {
            mul_div_down(per_ge_hour, n, i128::from(d))
        }
    }
}

/// A snapshot stores a headroom as exact rationals.
#[derive(Serialize, Deserialize)]
struct StoredHeadroom {
    room: Rational,
    per_ge_hour_by_kind: KindRates<Rational>,
    per_hour: Rational,
    falling: bool,
}

impl Serialize for Headroom {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let exact = |n: i128| Rational::from_i128_ratio(n, SCALE).unwrap_or_default();
        StoredHeadroom {
            room: exact(self.room),
            per_ge_hour_by_kind: self.per_ge_hour.map(exact),
            per_hour: exact(self.per_hour),
            falling: self.falling,
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Headroom {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let stored = StoredHeadroom::deserialize(d)?;
        Ok(Headroom {
            room: scaled_down(&stored.room),
            per_ge_hour: stored.per_ge_hour_by_kind.each_ref().map(scaled_up),
            per_hour: scaled_up(&stored.per_hour),
            falling: stored.falling,
        })
    }
}

/// A budgeted tenant's figures cannot reach their next lines before `until`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Watch {
    at: Timestamp,
    figures: Vec<Headroom>,
    until: Timestamp,
    /// The latest `until` may be: the month's end, or the next instant a
    /// price book takes over (its overhead applies to the whole month).
    limit: Timestamp,
    /// The admission answer while the watch holds: the reason a budget is
    /// spent, as priced at the watch's start.
    pub(super) spent: Option<Text>,
}

impl Watch {
    /// Until when the figures stay below their lines.
    pub(crate) fn until(&self) -> Timestamp {
        self.until
    }

    pub(super) fn new(
        at: Timestamp,
        limit: Timestamp,
        figures: Vec<Headroom>,
        spent: Option<Text>,
    ) -> Option<Watch> {
        let mut watch = Watch {
            at,
            figures,
            until: at,
            limit,
            spent,
        };
        watch.settle()?;
        Some(watch)
    }

    /// Works out `until` from the rooms and rates; `None` once a room is
    /// gone.
    fn settle(&mut self) -> Option<()> {
        let mut until = self.limit;
        for f in &self.figures {
            if f.room <= 0 {
                return None;
            }
            if f.per_hour == 0 {
                continue;
            }
            let micros = mul_div_down(f.room, MICROS_PER_HOUR, f.per_hour);
            let micros = i64::try_from(micros).unwrap_or(i64::MAX);
            until = until.min(
                self.at
                    .plus_micros(micros.min(i64::MAX - self.at.as_micros())),
            );
        }
        self.until = until;
        Some(())
    }

    /// Time passes to `now`: every figure may have moved at its rate.
    fn advance(&mut self, now: Timestamp) {
        let elapsed = micros_between(self.at, now);
        if elapsed > 0 {
            for f in &mut self.figures {
                let moved = mul_div_up(f.per_hour, elapsed, MICROS_PER_HOUR);
                f.room = f.room.saturating_sub(moved);
            }
            self.at = now;
        }
    }

    /// A segment of `ge` opened at `start` and runs on: every figure loses
    /// what it may have moved since its start (a rising one its compute, a
    /// falling one credits, were its devices failed), and may move faster.
    fn opened(
        &mut self,
        ge: &Rational,
        kind: RateKind,
        start: Timestamp,
        now: Timestamp,
    ) -> Option<()> {
        self.advance(now);
        let since_start = micros_between(start, now);
        for f in &mut self.figures {
            let rate = f.rate_of(ge, kind, true);
            let moved = mul_div_up(rate, since_start, MICROS_PER_HOUR);
            f.room = f.room.saturating_sub(moved);
            f.per_hour = f.per_hour.saturating_add(rate);
        }
        self.settle()
    }

    /// A segment of `ge` closed at `end`. A falling figure loses what the
    /// segment had accrued after `end`. A rising one slows down: every
    /// segment that closes was counted in its rate, running when the watch
    /// began or opened since (a split closes one and opens the next); its
    /// kind's rate comes off rounded down, so the rate left is never too
    /// low.
    fn closed(
        &mut self,
        ge: &Rational,
        kind: RateKind,
        end: Timestamp,
        now: Timestamp,
    ) -> Option<()> {
        self.advance(now);
        let after_end = micros_between(end, now);
        for f in &mut self.figures {
            if f.falling {
                let moved = mul_div_up(f.rate_of(ge, kind, true), after_end, MICROS_PER_HOUR);
                f.room = f.room.saturating_sub(moved);
            } else {
                f.per_hour = (f.per_hour - f.rate_of(ge, kind, false)).max(0);
            }
        }
        self.settle()
    }
}

/// Brings the watches up to what `events` and `segments` did to the
/// billing facts: a segment opened or closed revises its tenant's watch;
/// anything else the billing module takes in forgets the watches it may
/// touch.
pub(crate) fn revise<'e>(
    watches: &mut Watches,
    events: impl Iterator<Item = &'e Event>,
    segments: &[Arc<Segment>],
    now: Timestamp,
) {
    if watches.is_empty() {
        return;
    }
    for e in events {
        match &e.body {
            EventBody::PriceBook(b) => match &b.pool {
                Some(pool) => watches.forget_pool(pool),
                None => watches.clear(),
            },
            EventBody::NodeInventory(i) => watches.forget_pool(&i.pool),
            EventBody::DeviceHealth(h) => watches.forget_pool(&h.pool),
            EventBody::UsageRecord(u) => watches.set(&u.pool, &u.tenant, None),
            EventBody::TenantPolicy(t) => watches.set(&t.pool, &t.tenant, None),
            EventBody::ReservationDecision(d) => watches.set(&d.pool, &d.tenant, None),
            _ => {}
        }
    }
    for s in segments {
        let Some(watch) = watches.get_mut(&s.pool, &s.tenant) else {
            continue;
        };
        let kind = s.kind.rate_kind();
        let kept = match s.end {
            None => watch.opened(&s.ge(), kind, s.start, now),
            Some(end) => watch.closed(&s.ge(), kind, end, now),
        };
        match kept.map(|()| watch.until) {
            Some(until) => watches.lower_quiet(until),
            None => watches.set(&s.pool, &s.tenant, None),
        }
    }
}

#[cfg(test)]
mod tests;
