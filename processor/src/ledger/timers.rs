//! Timers: what becomes due as time passes — hold expiry, reservation
//! windows opening and closing. They fire in time order before the event
//! that moved time; at one instant, expiry first, then ends, then starts.

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::billing::UseKind;
use gpuledger_schemas::events::{Enforcement, HoldKind};

use super::decide::Decisions;
use super::reservations::Edge;
use super::{Reservation, State, segments};

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// (pool, job, attempt)
    HoldExpiry(String, String, i32),
    /// (pool, reservation)
    ReservationEnd(String, String),
    ReservationStart(String, String),
}

/// Which edge of a reservation's window is due at or before `now`, if
/// one is, and when.
fn window_due(r: &Reservation, now: Timestamp) -> Option<(Timestamp, Edge)> {
    r.next_edge().filter(|(at, _)| *at <= now)
}

/// The first timer due at or before `now`.
fn next_due(state: &State, now: Timestamp) -> Option<(Timestamp, Timer)> {
    // Nearly every event finds none: say so before naming any.
    if !any_due(state, now) {
        return None;
    }
    let mut due: Vec<(Timestamp, Timer)> = Vec::new();
    for (pool_name, pool) in state.pools.iter() {
        if let Some((at, (job, attempt))) = pool.live.next_expiry()
            && at <= now
        {
            due.push((
                at,
                Timer::HoldExpiry(pool_name.to_owned(), job.to_owned(), attempt),
            ));
        }
        for (id, r) in pool.reservations.iter() {
            let timer = match window_due(r, now) {
                Some((at, Edge::Start)) => (
                    at,
                    Timer::ReservationStart(pool_name.to_owned(), id.clone()),
                ),
                Some((at, Edge::End)) => {
                    (at, Timer::ReservationEnd(pool_name.to_owned(), id.clone()))
                }
                None => continue,
            };
            due.push(timer);
        }
    }
    due.into_iter().min()
}

/// Whether any timer is due at or before `now`. Asked on every event, so
/// it names no timer: nothing is copied or collected.
pub(crate) fn any_due(state: &State, now: Timestamp) -> bool {
    for pool in state.pools.values() {
        debug_assert_eq!(
            pool.reservations.edge_due(now),
            pool.reservations
                .values()
                .any(|r| window_due(r, now).is_some()),
            "pool {}: the kept next window edge disagrees with the windows at {now}",
            pool.name
        );
    }
    state.pools.values().any(|pool| {
        pool.live.next_expiry_at().is_some_and(|at| at <= now) || pool.reservations.edge_due(now)
    })
}

/// Fires every timer due at or before `now`, in order.
pub(crate) fn fire_due(state: &mut State, now: Timestamp, out: &mut Decisions<'_>) {
    while let Some((at, timer)) = next_due(state, now) {
        out.at(at);
        match timer {
            Timer::HoldExpiry(pool, job, attempt) => {
                if let Some(p) = state.pools.get_mut(&pool) {
                    p.live.remove((&job, attempt));
                }
            }
            Timer::ReservationStart(pool, id) => open_reservation(state, &pool, &id, at, out),
            Timer::ReservationEnd(pool, id) => close_reservation(state, &pool, &id, at, out),
        }
    }
    out.at(now);
}

/// A window opens: the tenant's holds move to `reserved` — burst first, then
/// quota, oldest admission first — while each fits the reserved GE not yet used.
fn open_reservation(
    state: &mut State,
    pool_name: &str,
    id: &str,
    at: Timestamp,
    out: &mut Decisions<'_>,
) {
    let Some(pool) = state.pools.get_mut(pool_name) else {
        return;
    };
    let Some(tenant) = pool.reservations.change(id, |r| {
        r.opened = true;
        r.tenant.clone()
    }) else {
        return;
    };
    let mut free = pool.active_reserved(&tenant, at) - pool.use_of(&tenant, HoldKind::Reserved);
    for from in [HoldKind::Burst, HoldKind::Quota] {
        for (key, ge) in pool.live.by_age(&tenant, from) {
            if ge > free {
                continue;
            }
            free = free - ge;
            let key = (key.0.as_str(), key.1);
            pool.live.reclassify(key, HoldKind::Reserved);
            segments::split(pool, key, UseKind::Reserved, at, &[], out);
            out.reclassified(pool_name, &tenant, key, from, HoldKind::Reserved, at);
        }
    }
}

/// A window closes (its end passed, or it was cancelled): the tenant's
/// reserved holds go, oldest admission first, to quota if they fit nominal,
/// else burst if they fit burst_ge, else burst with a `QuotaViolation` —
/// until reserved use fits the reserved GE still active.
pub(crate) fn close_reservation(
    state: &mut State,
    pool_name: &str,
    id: &str,
    at: Timestamp,
    out: &mut Decisions<'_>,
) {
    let Some(pool) = state.pools.get_mut(pool_name) else {
        return;
    };
    let Some((was_open, tenant)) = pool.reservations.change(id, |r| {
        let was_open = r.opened;
        r.closed = true;
        r.opened = true;
        (was_open, r.tenant.clone())
    }) else {
        return;
    };
    if !was_open {
        return;
    }
    let remaining = pool.active_reserved(&tenant, at);
    let (nominal, burst_ge) = pool.policy_ge(&tenant);
    let enforcement = pool
        .policies
        .get(&tenant)
        .map_or(Enforcement::Alert, |p| p.enforcement);
    for (key, ge) in pool.live.by_age(&tenant, HoldKind::Reserved) {
        if pool.use_of(&tenant, HoldKind::Reserved) <= remaining {
            break;
        }
        let quota_room = nominal.clone() - pool.use_of(&tenant, HoldKind::Quota);
        let burst_room = burst_ge.clone() - pool.use_of(&tenant, HoldKind::Burst);
        let to = if ge <= quota_room {
            HoldKind::Quota
        } else {
            HoldKind::Burst
        };
        let key = (key.0.as_str(), key.1);
        pool.live.reclassify(key, to);
        segments::split(pool, key, to.into(), at, &[], out);
        out.reclassified(pool_name, &tenant, key, HoldKind::Reserved, to, at);
        if to == HoldKind::Burst && ge > burst_room {
            let observed = pool.use_of(&tenant, HoldKind::Burst);
            out.violation(
                pool_name,
                &tenant,
                Some(key),
                &observed,
                &burst_ge,
                enforcement,
                "reservation_ended_over_quota",
            );
        }
    }
}
