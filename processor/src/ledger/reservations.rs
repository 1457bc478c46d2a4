//! Reservations (DESIGN §4): confirmed only if spare capacity holds them at
//! every instant of the window (no double booking); cancelled ones end at
//! the cancel and reclassify then.

use std::collections::BTreeMap;

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::events::{ReservationCancel, ReservationOutcome, ReservationRequest};

use super::decide::Decisions;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{Ge, Pool, Rejection, Reservation, State, timers};

/// How long, how far ahead and how many reservations a tenant may ask for
/// (docs/security.md): the ledger rejects a request past them, and the
/// control API refuses one before it is appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReservationLimits {
    /// The longest window, microseconds.
    pub max_length_micros: i64,
    /// How far after now a window may start, microseconds.
    pub max_ahead_micros: i64,
    /// Reservations a tenant may hold open (confirmed, not yet over) in a
    /// pool.
    pub max_open_per_tenant: usize,
}

const MICROS_PER_DAY: i64 = 86_400_000_000;

impl Default for ReservationLimits {
    /// 90 days long, starting within a year, 100 open.
    fn default() -> Self {
        Self {
            max_length_micros: 90 * MICROS_PER_DAY,
            max_ahead_micros: 365 * MICROS_PER_DAY,
            max_open_per_tenant: 100,
        }
    }
}

impl ReservationLimits {
    /// Whether `r`'s window is within the limits at `now`: the field past
    /// one and why.
    pub fn check_window(
        &self,
        r: &ReservationRequest,
        now: Timestamp,
    ) -> Result<(), (&'static str, String)> {
        let days = |micros: i64| micros / MICROS_PER_DAY;
        let length = r.end.as_micros().saturating_sub(r.start.as_micros());
        if length > self.max_length_micros {
            return Err((
                "end",
                format!(
                    "too_long: the window is {} days long; at most {} days (--reservation-max-days)",
                    days(length),
                    days(self.max_length_micros)
                ),
            ));
        }
        let ahead = r.start.as_micros().saturating_sub(now.as_micros());
        if ahead > self.max_ahead_micros {
            return Err((
                "start",
                format!(
                    "too_far_ahead: the window starts {} days from now ({now}); at most {} days (--reservation-max-ahead-days)",
                    days(ahead),
                    days(self.max_ahead_micros)
                ),
            ));
        }
        Ok(())
    }

    /// Whether `tenant` may open one more reservation when it holds `open`.
    pub fn check_open(&self, tenant: &str, open: usize) -> Result<(), (&'static str, String)> {
        if open >= self.max_open_per_tenant {
            return Err((
                "reservation_id",
                format!(
                    "too_many_open: {tenant} holds {open} open reservations in this pool; at most {} (--reservation-max-open)",
                    self.max_open_per_tenant
                ),
            ));
        }
        Ok(())
    }
}

pub(crate) fn request(
    state: &mut State,
    r: &ReservationRequest,
    out: &mut Decisions<'_>,
) -> Result<(), Rejection> {
    let now = state.current();
    let limits = state.config.reservations;
    let pool = state.pool_mut(&r.pool)?;
    let g = Ge::of(r.slices, r.max_slices);
    if let Some(existing) = pool.reservations.get(&r.reservation_id) {
        let same = existing.tenant == r.tenant
            && existing.ge == g
            && existing.start == r.start
            && existing.end == r.end;
        if same {
            return Ok(());
        }
        return Err(Rejection::ReservationChanged {
            reservation_id: r.reservation_id.to_string(),
        });
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
    let open = pool.reservations.open_of(&r.tenant);
    let limited = limits
        .check_window(r, now)
        .and_then(|()| limits.check_open(&r.tenant, open));
    if let Err((_, reason)) = limited {
        out.reservation(r, ReservationOutcome::Rejected, &reason);
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

/// The GE booked by confirmed reservations over [from, to), as steps:
/// `(at, booked)`, each in force until the next step's `at` (the last
/// until `to`), the first at `from`. One sorted sweep over the window's
/// edges: O(R log R) for R reservations.
pub(crate) fn booked_steps<'a>(
    reservations: impl Iterator<Item = &'a Reservation>,
    from: Timestamp,
    to: Timestamp,
) -> Vec<(Timestamp, Ge)> {
    let mut booked = Ge::zero();
    // (instant, whether it is an end, GE); the edges of one instant make
    // one step.
    let mut edges: Vec<(Timestamp, bool, &Ge)> = Vec::new();
    for r in reservations.filter(|r| r.confirmed && r.start < to && r.effective_end() > from) {
        if r.start <= from {
            booked += &r.ge;
        } else {
            edges.push((r.start, false, &r.ge));
        }
        if r.effective_end() < to {
            edges.push((r.effective_end(), true, &r.ge));
        }
    }
    edges.sort_by_key(|(at, _, _)| *at);
    let mut steps = vec![(from, booked.clone())];
    for (at, is_end, ge) in edges {
        if is_end {
            booked -= ge;
        } else {
            booked += ge;
        }
        match steps.last_mut() {
            Some(last) if last.0 == at => last.1 = booked.clone(),
            _ => steps.push((at, booked.clone())),
        }
    }
    steps
}

/// Checks Σ confirmed overlapping reservations + g ≤ spare at every instant
/// of [start, end); spare is taken at decision time, constant over the window.
fn first_conflict(pool: &Pool, start: Timestamp, end: Timestamp, g: &Ge) -> Option<String> {
    let spare = pool.spare();
    let steps = booked_steps(pool.reservations.values(), start, end);
    let (at, booked) = steps
        .into_iter()
        .find(|(_, booked)| booked.clone() + g.clone() > spare)?;
    // Who holds it then, and until when: only for the reason's text.
    let overlapping: Vec<(&String, &Reservation)> = pool
        .reservations
        .iter()
        .filter(|(_, r)| r.active_at(at))
        .collect();
    let until = overlapping
        .iter()
        .map(|(_, r)| r.effective_end())
        .min()
        .unwrap_or(end)
        .min(end);
    let ids: Vec<&str> = overlapping.iter().map(|(id, _)| id.as_str()).collect();
    Some(format!(
        "conflict over [{at}, {until}): {booked} GE booked by {} + {g} GE requested exceeds spare {spare} GE",
        if ids.is_empty() {
            "nobody".to_owned()
        } else {
            ids.join(", ")
        }
    ))
}

pub(crate) fn cancel(
    state: &mut State,
    c: &ReservationCancel,
    out: &mut Decisions<'_>,
) -> Result<(), Rejection> {
    let now = state.current();
    let pool = state.pool_mut(&c.pool)?;
    let Some(reservation) = pool.reservations.get(&c.reservation_id) else {
        return Err(Rejection::UnknownReservation {
            reservation_id: c.reservation_id.to_string(),
            pool: c.pool.to_string(),
        });
    };
    if reservation.tenant != c.tenant {
        return Err(Rejection::NotYourReservation {
            reservation_id: c.reservation_id.to_string(),
            owner: reservation.tenant.clone(),
            tenant: c.tenant.to_string(),
        });
    }
    if !reservation.confirmed {
        return Err(Rejection::ReservationNotConfirmed {
            reservation_id: c.reservation_id.to_string(),
        });
    }
    if reservation.cancelled_at.is_some() || reservation.closed {
        return Err(Rejection::ReservationOver {
            reservation_id: c.reservation_id.to_string(),
        });
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
    timers::close_reservation(state, &c.pool, &c.reservation_id, now, out);
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

    /// How many reservations `tenant` holds open: confirmed and not over.
    pub(crate) fn open_of(&self, tenant: &str) -> usize {
        self.by_id
            .values()
            .filter(|r| r.confirmed && !r.closed && r.cancelled_at.is_none() && r.tenant == tenant)
            .count()
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

#[cfg(test)]
mod tests;
