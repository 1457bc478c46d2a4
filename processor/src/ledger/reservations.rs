//! Reservations (DESIGN §4): confirmed only if spare capacity holds them at
//! every instant of the window (no double booking); cancelled ones end at
//! the cancel and reclassify then.

use std::collections::{BTreeMap, BTreeSet};

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::events::{ReservationCancel, ReservationOutcome, ReservationRequest};

use super::decide::Decisions;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Ge, Ledger, Pool, Reservation, timers};

pub(crate) fn request(
    ledger: &mut Ledger,
    r: &ReservationRequest,
    out: &mut Decisions<'_>,
) -> Result<(), String> {
    let now = ledger.current();
    let pool = ledger.pool_mut(&r.pool)?;
    let g = Ge::of(r.slices, r.max_slices);
    if let Some(existing) = pool.reservations.get(&r.reservation_id) {
        let same = existing.tenant == r.tenant
            && existing.ge == g
            && existing.start == r.start
            && existing.end == r.end;
        if same {
            return Ok(());
        }
        return Err(format!(
            "reservation {:?} was already requested with other content",
            r.reservation_id
        ));
    }
    let mut reservation = Reservation {
        tenant: r.tenant.clone(),
        slices: r.slices,
        max_slices: r.max_slices,
        ge: g.clone(),
        start: r.start.max(now),
        end: r.end,
        confirmed: false,
        cancelled_at: None,
        opened: false,
        closed: true,
    };
    if r.end <= now {
        out.reservation(
            r,
            ReservationOutcome::Rejected,
            &format!(
                "window_over: the window ends at {} and it is now {now}",
                r.end
            ),
        );
        pool.reservations
            .insert(r.reservation_id.clone(), reservation);
        return Ok(());
    }
    match first_conflict(pool, reservation.start, r.end, &g) {
        Some(reason) => {
            out.reservation(r, ReservationOutcome::Rejected, &reason);
        }
        None => {
            reservation.confirmed = true;
            reservation.closed = false;
            out.reservation(r, ReservationOutcome::Confirmed, "confirmed");
        }
    }
    pool.reservations
        .insert(r.reservation_id.clone(), reservation);
    Ok(())
}

/// Checks Σ confirmed overlapping reservations + g ≤ spare at every instant
/// of [start, end); spare is taken at decision time, constant over the window.
fn first_conflict(pool: &Pool, start: Timestamp, end: Timestamp, g: &Ge) -> Option<String> {
    let spare = pool.spare();
    let confirmed: Vec<(&String, &Reservation)> = pool
        .reservations
        .iter()
        .filter(|(_, r)| r.confirmed && r.start < end && r.effective_end() > start)
        .collect();
    // The booked sum only rises where a reservation starts.
    let mut points: BTreeSet<Timestamp> = BTreeSet::from([start]);
    points.extend(
        confirmed
            .iter()
            .map(|(_, r)| r.start)
            .filter(|s| *s > start && *s < end),
    );
    for at in points {
        let overlapping: Vec<&(&String, &Reservation)> = confirmed
            .iter()
            .filter(|(_, r)| r.start <= at && at < r.effective_end())
            .collect();
        let booked: Ge = overlapping.iter().map(|(_, r)| r.ge.clone()).sum();
        if booked.clone() + g.clone() > spare {
            let until = overlapping
                .iter()
                .map(|(_, r)| r.effective_end())
                .min()
                .unwrap_or(end)
                .min(end);
            let ids: Vec<&str> = overlapping.iter().map(|(id, _)| id.as_str()).collect();
            return Some(format!(
                "conflict over [{at}, {until}): {booked} GE booked by {} + {g} GE requested exceeds spare {spare} GE",
                if ids.is_empty() {
                    "nobody".to_owned()
                } else {
                    ids.join(", ")
                }
            ));
        }
    }
    None
}

pub(crate) fn cancel(
    ledger: &mut Ledger,
    c: &ReservationCancel,
    out: &mut Decisions<'_>,
) -> Result<(), String> {
    let now = ledger.current();
    let pool = ledger.pool_mut(&c.pool)?;
    let Some(reservation) = pool.reservations.get(&c.reservation_id) else {
        return Err(format!(
            "unknown reservation {:?} in pool {:?}",
            c.reservation_id, c.pool
        ));
    };
    if reservation.tenant != c.tenant {
        return Err(format!(
            "reservation {:?} belongs to {:?}, not {:?}",
            c.reservation_id, reservation.tenant, c.tenant
        ));
    }
    if !reservation.confirmed {
        return Err(format!(
            "reservation {:?} was not confirmed, so there is nothing to cancel",
            c.reservation_id
        ));
    }
    if reservation.cancelled_at.is_some() || reservation.closed {
        return Err(format!(
            "reservation {:?} is already over",
            c.reservation_id
        ));
    }
    let snapshot = pool
        .reservations
        .change(&c.reservation_id, |r| {
            r.cancelled_at = Some(now);
            r.clone()
        })
        .unwrap_or_else(|| unreachable!("found above"));
    out.reservation_parts(
        &c.pool,
        &c.reservation_id,
        &c.tenant,
        snapshot.slices,
        snapshot.max_slices,
        snapshot.start,
        snapshot.end,
        ReservationOutcome::Cancelled,
        "cancelled",
    );
    // If its window had opened, the tenant's reserved holds reclassify now.
    timers::close_reservation(ledger, &c.pool, &c.reservation_id, now, out);
    Ok(())
}

/// A pool's reservations by id, with the instant from which the earliest
/// window edge not yet processed is due: the timers ask on every event, and
/// the windows change only when a reservation is asked for, cancelled, or
/// reaches an edge.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reservations {
    by_id: BTreeMap<String, Reservation>,
    /// When the earliest [`Reservation::next_edge`] is due.
    next_edge: Option<Timestamp>,
}

/// A reservation window's edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Edge {
    Start,
    End,
}

impl Reservation {
    /// The edge of the window still to be processed, if one is, and from
    /// when it is due: its start, until it opens (unless cancelled before
    /// it could), then its end (or cancel).
    pub(crate) fn next_edge(&self) -> Option<(Timestamp, Edge)> {
        if !self.confirmed || self.closed {
            return None;
        }
        if !self.opened && self.start < self.effective_end() {
            Some((self.start, Edge::Start))
        } else {
            Some((self.effective_end(), Edge::End))
        }
    }
}

impl Reservations {
    pub(crate) fn get(&self, id: &str) -> Option<&Reservation> {
        self.by_id.get(id)
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Reservation> {
        self.by_id.values()
    }

    /// Every reservation with its id, in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&String, &Reservation)> {
        self.by_id.iter()
    }

    /// Adds or replaces the reservation `id`.
    pub(crate) fn insert(&mut self, id: String, reservation: Reservation) {
        self.by_id.insert(id, reservation);
        self.find_next_edge();
    }

    /// Changes the reservation `id`, if there is one, by `f`.
    pub(crate) fn change<R>(
        &mut self,
        id: &str,
        f: impl FnOnce(&mut Reservation) -> R,
    ) -> Option<R> {
        let changed = f(self.by_id.get_mut(id)?);
        self.find_next_edge();
        Some(changed)
    }

    /// Whether an edge of some window is due at or before `now`.
    pub(crate) fn edge_due(&self, now: Timestamp) -> bool {
        self.next_edge.is_some_and(|at| at <= now)
    }

    fn find_next_edge(&mut self) {
        self.next_edge = self
            .by_id
            .values()
            .filter_map(|r| r.next_edge().map(|(at, _)| at))
            .min();
    }
}

impl PartialEq for Reservations {
    fn eq(&self, other: &Self) -> bool {
        self.by_id == other.by_id
    }
}

/// Stored as the map by id, as before the next edge was kept.
impl Serialize for Reservations {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.by_id.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Reservations {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let mut reservations = Reservations {
            by_id: BTreeMap::deserialize(d)?,
            next_edge: None,
        };
        reservations.find_next_edge();
        Ok(reservations)
    }
}
