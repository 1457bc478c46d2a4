//! Billing segments (DESIGN §5, §6 `allocations`): a running attempt's
//! allocation, cut where its kind changes. A segment is reported twice:
//! when it opens (no `end`) and when it closes (with `end`, and on the
//! attempt's last segment its final state and work units).

use std::collections::BTreeSet;

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::billing::{Segment, UseKind};
use gpuledger_schemas::events::JobEvent;

use super::by_attempt::AttemptKey;
use super::decide::Decisions;
use super::{Ge, OpenSegment, Pool};

/// How the attempt's allocation ends, on its last segment.
pub(crate) struct Ending<'a> {
    pub(crate) at: Timestamp,
    pub(crate) event: &'a JobEvent,
}

fn row(
    pool_name: &str,
    pool: &Pool,
    key: AttemptKey<'_>,
    segment: &OpenSegment,
    end: Option<Timestamp>,
    ending: Option<&Ending<'_>>,
) -> Option<Segment> {
    let attempt = pool.attempts.get(key)?;
    let (slices, max_slices) = segment.ge.to_rational().to_i64_pair()?;
    Some(Segment {
        pool: pool_name.to_owned(),
        tenant: attempt.tenant.clone(),
        job_id: key.0.to_owned(),
        attempt: key.1,
        kind: segment.kind,
        slices,
        max_slices,
        model: pool.inventory.model().unwrap_or_default().to_owned(),
        devices: attempt.devices.iter().cloned().collect(),
        start: segment.start,
        end,
        final_state: ending.map(|e| e.event.state),
        work_units: ending.and_then(|e| e.event.work_units.clone()),
        work_unit_name: ending.and_then(|e| e.event.work_unit_name.clone()),
    })
}

/// Opens the attempt's first segment at `at`.
pub(crate) fn open(
    pool_name: &str,
    pool: &mut Pool,
    key: AttemptKey<'_>,
    kind: UseKind,
    ge: Ge,
    at: Timestamp,
    out: &mut Decisions<'_>,
) {
    let segment = OpenSegment {
        start: at,
        kind,
        ge,
    };
    if let Some(r) = row(pool_name, pool, key, &segment, None, None) {
        out.segment(r);
    }
    if let Some(attempt) = pool.attempts.get_mut(key) {
        attempt.segment = Some(segment);
    }
}

/// Cuts a running attempt's segment at `at` and goes on at `kind` (a
/// reclassification), holding `joined` devices too from `at` on (another
/// node of the job started). The closed part keeps the devices it held.
/// Nothing happens for an attempt that is not running.
pub(crate) fn split(
    pool_name: &str,
    pool: &mut Pool,
    key: AttemptKey<'_>,
    kind: UseKind,
    at: Timestamp,
    joined: BTreeSet<String>,
    out: &mut Decisions<'_>,
) {
    let Some(current) = pool.attempts.get(key).and_then(|a| a.segment.clone()) else {
        return;
    };
    if at > current.start
        && let Some(closed) = row(pool_name, pool, key, &current, Some(at), None)
    {
        out.segment(closed);
    }
    if let Some(attempt) = pool.attempts.get_mut(key) {
        attempt.devices.extend(joined);
    }
    // A cut at or before the segment's start restates the whole segment.
    let start = current.start.max(at);
    open(pool_name, pool, key, kind, current.ge, start, out);
}

/// Closes the attempt's last segment at its terminal event.
pub(crate) fn close(
    pool_name: &str,
    pool: &mut Pool,
    key: AttemptKey<'_>,
    ending: &Ending<'_>,
    out: &mut Decisions<'_>,
) {
    let Some(current) = pool.attempts.get_mut(key).and_then(|a| a.segment.take()) else {
        return;
    };
    let end = ending.at.max(current.start);
    if let Some(closed) = row(pool_name, pool, key, &current, Some(end), Some(ending)) {
        out.segment(closed);
    }
}
