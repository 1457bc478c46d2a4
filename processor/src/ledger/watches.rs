//! Budget watches (see `budgets`): how far each budgeted tenant's
//! month-to-date figures are from their next lines, and how fast they can
//! move there at most, so that the month is priced again only when a line
//! could have been reached.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use gpuledger_schemas::billing::Segment;
use gpuledger_schemas::{Event, EventBody, Rational, Timestamp};

/// Each budgeted tenant's watch, by pool and tenant: looked up by
/// borrowed names after every event. A snapshot stores it as a list of
/// ((pool, tenant), watch) pairs.
///
/// Beside them, derived and not stored: an instant before which no
/// budgeted tenant is due to be priced again (see [`Watches::quiet_at`]),
/// so that most events need not look at every tenant's watch.
#[derive(Debug, Clone, Default)]
pub(crate) struct Watches {
    by_pool: BTreeMap<String, BTreeMap<String, Watch>>,
    /// When `Some(t)`: every budgeted tenant has a watch, and none runs
    /// out before `t`. `None`: not known, look.
    quiet_until: Option<Timestamp>,
}

impl PartialEq for Watches {
    fn eq(&self, other: &Self) -> bool {
        self.by_pool == other.by_pool
    }
}

impl Watches {
    /// `tenant`'s watch in `pool`, if one is kept.
    pub(crate) fn get(&self, pool: &str, tenant: &str) -> Option<&Watch> {
        self.by_pool.get(pool)?.get(tenant)
    }

    fn get_mut(&mut self, pool: &str, tenant: &str) -> Option<&mut Watch> {
        self.by_pool.get_mut(pool)?.get_mut(tenant)
    }

    /// Keeps `watch` for `tenant` in `pool`, or forgets it (`None`).
    pub(crate) fn set(&mut self, pool: &str, tenant: &str, watch: Option<Watch>) {
        match watch {
            Some(watch) => {
                self.lower_quiet(watch.until);
                let tenants = match self.by_pool.get_mut(pool) {
                    Some(tenants) => tenants,
                    None => self.by_pool.entry(pool.to_owned()).or_default(),
                };
                tenants.insert(tenant.to_owned(), watch);
            }
            None => {
                self.quiet_until = None;
                if let Some(tenants) = self.by_pool.get_mut(pool) {
                    tenants.remove(tenant);
                    if tenants.is_empty() {
                        self.by_pool.remove(pool);
                    }
                }
            }
        }
    }

    /// Forgets every watch in `pool`.
    fn forget_pool(&mut self, pool: &str) {
        self.quiet_until = None;
        self.by_pool.remove(pool);
    }

    /// Forgets every watch.
    pub(crate) fn clear(&mut self) {
        self.quiet_until = None;
        self.by_pool.clear();
    }

    fn is_empty(&self) -> bool {
        self.by_pool.is_empty()
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
        s.collect_seq(self.by_pool.iter().flat_map(|(pool, tenants)| {
            tenants
                .iter()
                .map(move |(tenant, watch)| ((pool, tenant), watch))
        }))
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

/// Microseconds in an hour, as a rational.
fn hour() -> Rational {
    Rational::from_integer(3_600_000_000)
}

/// `micros` (none if negative) in hours.
fn hours(micros: i64) -> Rational {
    Rational::new(micros.max(0), 3_600_000_000).unwrap_or_default()
}

/// How far one figure (money or GPU hours) is from where a decision could
/// change, as of `Watch::at`, and how fast it may move there at most, per
/// GE-hour of running use and in all. A rising figure is below its next
/// line and grows as time passes and segments open; a falling one is at or
/// above its budget and can only come down by health credits on running
/// use, or by a segment closed back in time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Headroom {
    pub(super) room: Rational,
    pub(super) per_ge_hour: Rational,
    pub(super) per_hour: Rational,
    pub(super) falling: bool,
}

/// A budgeted tenant's figures cannot reach their next lines before `until`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Watch {
    at: Timestamp,
    figures: Vec<Headroom>,
    until: Timestamp,
    /// The latest `until` may be: the month's end, or the next instant a
    /// price book takes over (its overhead applies to the whole month).
    /// A snapshot from before this field has none: the watch then ends at
    /// its next revision, and the month is priced again.
    #[serde(default = "no_limit")]
    limit: Timestamp,
    /// The admission answer while the watch holds: the reason a budget is
    /// spent, as priced at the watch's start.
    pub(super) spent: Option<String>,
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
        spent: Option<String>,
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
            if f.room.is_zero() || f.room.is_negative() {
                return None;
            }
            if f.per_hour.is_zero() {
                continue;
            }
            let micros = (f.room.clone() * hour())
                .checked_div(&f.per_hour)?
                .floor_i64()?;
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
        let elapsed = hours(now.as_micros() - self.at.as_micros());
        for f in &mut self.figures {
            f.room = f.room.clone() - f.per_hour.clone() * elapsed.clone();
        }
        self.at = now;
    }

    /// A segment of `ge` opened at `start` and runs on: every figure loses
    /// what it may have moved since its start (a rising one its compute, a
    /// falling one credits, were its devices failed), and may move faster.
    fn opened(&mut self, ge: &Rational, start: Timestamp, now: Timestamp) -> Option<()> {
        self.advance(now);
        let since_start = hours(now.as_micros() - start.as_micros());
        for f in &mut self.figures {
            let rate = f.per_ge_hour.clone() * ge.clone();
            f.room = f.room.clone() - rate.clone() * since_start.clone();
            f.per_hour = f.per_hour.clone() + rate;
        }
        self.settle()
    }

    /// A segment of `ge` closed at `end`. A falling figure loses what the
    /// segment had accrued after `end`. A rising one slows down: every
    /// segment that closes was counted in its rate, running when the watch
    /// began or opened since (a split closes one and opens the next).
    fn closed(&mut self, ge: &Rational, end: Timestamp, now: Timestamp) -> Option<()> {
        self.advance(now);
        let after_end = hours(now.as_micros() - end.as_micros());
        for f in &mut self.figures {
            let rate = f.per_ge_hour.clone() * ge.clone();
            if f.falling {
                f.room = f.room.clone() - rate * after_end.clone();
            } else {
                f.per_hour = (f.per_hour.clone() - rate).max(Rational::zero());
            }
        }
        self.settle()
    }
}

/// The limit of a watch restored without one: it ends at its next revision.
fn no_limit() -> Timestamp {
    Timestamp::from_micros(0)
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
        let kept = match s.end {
            None => watch.opened(&s.ge(), s.start, now),
            Some(end) => watch.closed(&s.ge(), end, now),
        };
        match kept.map(|()| watch.until) {
            Some(until) => watches.lower_quiet(until),
            None => watches.set(&s.pool, &s.tenant, None),
        }
    }
}
