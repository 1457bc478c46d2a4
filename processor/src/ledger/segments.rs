//! Billing segments (DESIGN §5, §6 `allocations`): a running attempt's
//! allocation, cut where its kind changes. A segment is reported twice:
//! when it opens (no `end`) and when it closes (with `end`, and on the
//! attempt's last segment its final state and work units).

use std::sync::Arc;

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::billing::{Segment, UseKind};
use gpuledger_schemas::events::JobEvent;

use super::decide::Decisions;
use super::{Attempt, Ge, OpenSegment, Pool};
use gpuledger_collections::by_attempt::AttemptKey;

/// How the attempt's allocation ends, on its last segment.
pub(crate) struct Ending<'a> {
    pub(crate) at: Timestamp,
    pub(crate) event: &'a JobEvent,
}

/// The billing row of `attempt`, numbered `number` of the job whose id
/// the state stores as `job_id`, in the pool `pool_name` of GPU `model`.
fn row(
    pool_name: &Arc<str>,
    model: Arc<str>,
    (job_id, number): (&Arc<str>, i32),
    attempt: &Attempt,
    segment: &OpenSegment,
    end: Option<Timestamp>,
    ending: Option<&Ending<'_>>,
) -> Option<Segment> {
    let (slices, max_slices) = segment.ge.to_i64_pair()?;
    Some(Segment {
        pool: Arc::clone(pool_name),
        tenant: Arc::clone(&attempt.tenant),
        job_id: Arc::clone(job_id),
        attempt: number,
        kind: segment.kind,
        slices,
        max_slices,
        model,
        devices: Arc::clone(&attempt.devices),
        start: segment.start,
        end,
        final_state: ending.map(|e| e.event.state),
        work_units: ending.and_then(|e| e.event.work_units.clone()),
        work_unit_name: ending.and_then(|e| e.event.work_unit_name.clone()),
    })
}

/// `devices` as an attempt holds them: sorted, each once, each the
/// inventory's own text; or the first that the pool does not list.
pub(crate) fn device_list<'a>(
    pool: &Pool,
    devices: impl Iterator<Item = &'a String>,
) -> Result<Arc<[Arc<str>]>, &'a String> {
    let mut unknown = None;
    let list = sorted_once(devices.map_while(|d| {
        let shared = pool.inventory.shared_uuid(d);
        if shared.is_none() {
            unknown = Some(d);
        }
        shared
    }));
    unknown.map_or(Ok(list), Err)
}

/// `devices` sorted, each once.
fn sorted_once(mut devices: impl Iterator<Item = Arc<str>>) -> Arc<[Arc<str>]> {
    // Most attempts hold one device: no list to sort on the way.
    let Some(first) = devices.next() else {
        return Arc::new([]);
    };
    let Some(second) = devices.next() else {
        return Arc::new([first]);
    };
    let mut list: Vec<Arc<str>> = [first, second].into_iter().chain(devices).collect();
    list.sort_unstable();
    list.dedup();
    list.into()
}

/// Opens a segment of `attempt` (numbered `number` of the job stored as
/// `job_id`, in `pool_name` of GPU `model`) at `at`.
pub(crate) fn open(
    (pool_name, model): (&Arc<str>, Arc<str>),
    job: (&Arc<str>, i32),
    attempt: &mut Attempt,
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
    if let Some(r) = row(pool_name, model, job, attempt, &segment, None, None) {
        out.segment(r);
    }
    attempt.segment = Some(segment);
}

/// Cuts a running attempt's segment at `at` and goes on at `kind` (a
/// reclassification), holding `joined` devices too from `at` on (another
/// node of the job started). The closed part keeps the devices it held.
/// Nothing happens for an attempt that is not running.
pub(crate) fn split(
    pool: &mut Pool,
    key: AttemptKey<'_>,
    kind: UseKind,
    at: Timestamp,
    joined: &[Arc<str>],
    out: &mut Decisions<'_>,
) {
    let model = pool.inventory.shared_model();
    let Some((job_id, attempt)) = pool.live.attempt_mut_with_job(key) else {
        return;
    };
    let Some(current) = attempt.segment.clone() else {
        return;
    };
    let job = (job_id, key.1);
    if at > current.start
        && let Some(closed) = row(
            &pool.name,
            model.clone(),
            job,
            attempt,
            &current,
            Some(at),
            None,
        )
    {
        out.segment(closed);
    }
    join(attempt, joined);
    // A cut at or before the segment's start restates the whole segment.
    let start = current.start.max(at);
    open(
        (&pool.name, model),
        job,
        attempt,
        kind,
        current.ge,
        start,
        out,
    );
}

/// The attempt holds `joined` devices too.
pub(crate) fn join(attempt: &mut Attempt, joined: &[Arc<str>]) {
    attempt.devices = sorted_once(attempt.devices.iter().chain(joined).cloned());
}

/// Closes the last segment of `attempt`, just taken out of the live state,
/// at its terminal event.
pub(crate) fn close(
    (pool_name, model): (&Arc<str>, Arc<str>),
    job: (&Arc<str>, i32),
    attempt: &mut Attempt,
    ending: &Ending<'_>,
    out: &mut Decisions<'_>,
) {
    let Some(current) = attempt.segment.take() else {
        return;
    };
    let end = ending.at.max(current.start);
    if let Some(closed) = row(
        pool_name,
        model,
        job,
        attempt,
        &current,
        Some(end),
        Some(ending),
    ) {
        out.segment(closed);
    }
}
