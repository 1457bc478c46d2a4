//! Job lifecycle: `started` turns a hold into running use (or records
//! unadmitted use); a terminal event releases it.

use std::sync::Arc;

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::events::{Enforcement, JobEvent, JobState};

use gpuledger_schemas::billing::UseKind;

use gpuledger_collections::by_attempt::AttemptKey;
use gpuledger_collections::by_name::same_text;

use super::decide::Decisions;
use super::store::Records;
use super::{Attempt, AttemptName, AttemptPhase, Ge, Rejection, State, segments};

pub(crate) fn apply(
    state: &mut State,
    e: &JobEvent,
    at: Timestamp,
    records: &mut Records,
    out: &mut Decisions<'_>,
) -> Result<(), Rejection> {
    let pool = state.pool_mut(&e.pool)?;
    let key = (e.job_id.as_str(), e.attempt);
    let found = pool.live.find(key);
    let live = found.attempt;
    // An attempt that ended left the live state: only one not live may be
    // among the ended, and one with a hold only if it was admitted after
    // its end.
    let ended_tenant = match (live, found.hold) {
        (Some(_), _) => None,
        (None, Some(hold)) if !hold.after_end => None,
        (None, _) => records.ended.get(&e.pool, key),
    };
    let known_tenant = live.map(|a| &*a.tenant).or(ended_tenant);
    if let Some(tenant) = known_tenant
        && !same_text(tenant, &e.tenant)
    {
        return Err(Rejection::TenantMismatch {
            tenant: e.tenant.to_string(),
            attempt: AttemptName::of(key),
            known: tenant.to_owned(),
        });
    }
    if let Some(hold) = found.hold
        && !same_text(&hold.tenant, &e.tenant)
    {
        return Err(Rejection::AdmissionTenantMismatch {
            tenant: e.tenant.to_string(),
            attempt: AttemptName::of(key),
            admitted: hold.tenant.to_string(),
        });
    }
    let phase = live.map(|a| a.phase);
    let started_at = live.and_then(|a| a.started_at);
    if ended_tenant.is_some() || phase == Some(AttemptPhase::Ended) {
        return Err(Rejection::AfterEnd {
            attempt: AttemptName::of(key),
            state: e.state,
        });
    }
    let named = e.devices.iter().flatten();
    let unknown = |device: &String| Rejection::UnknownDevice {
        device: device.clone(),
        attempt: AttemptName::of(key),
        pool: e.pool.to_string(),
    };
    // A start keeps its devices as the inventory holds them, found in the
    // one lookup that also checks them; any other state only checks.
    let started_devices = if e.state == JobState::Started {
        Some(segments::device_list(pool, named.clone()).map_err(unknown)?)
    } else {
        if let Some(device) = named.clone().find(|d| pool.inventory.device(d).is_none()) {
            return Err(unknown(device));
        }
        None
    };

    match e.state {
        JobState::Submitted => {
            pool.live
                .attempt_or_insert_with(key, || Attempt::new(Arc::clone(e.tenant.as_arc())));
        }
        JobState::Started if phase == Some(AttemptPhase::Running) => {
            // Another node of a multi-node job: its devices join from its
            // start on; the attempt keeps its first start.
            let devices = started_devices.unwrap_or_default();
            let kind = pool
                .live
                .attempt(key)
                .and_then(|a| a.segment.as_ref())
                .map(|s| s.kind);
            match kind {
                Some(kind) => segments::split(pool, key, kind, at, &devices, out),
                None => {
                    if let Some(attempt) = pool.live.attempt_mut(key) {
                        segments::join(attempt, &devices);
                    }
                }
            }
        }
        JobState::Started => {
            // Running now: the hold no longer expires.
            let devices = started_devices.unwrap_or_default();
            let hold = pool.live.start(key).map(|hold| {
                let kind = UseKind::from(hold.kind);
                (kind, hold.ge.clone(), Arc::clone(&hold.tenant))
            });
            // The hold's tenant is this event's (checked above): shared.
            let (admitted, tenant) = match hold {
                Some((kind, ge, tenant)) => (Some((kind, ge)), tenant),
                None => (None, Arc::clone(e.tenant.as_arc())),
            };
            let mut unadmitted_ge = None;
            if admitted.is_none() {
                let ge = if !devices.is_empty() {
                    devices
                        .iter()
                        .filter_map(|d| pool.inventory.device(d))
                        .map(|d| Ge::of(d.slices, d.max_slices))
                        .sum()
                } else if let (Some(s), Some(m)) = (e.requested_slices, e.requested_max_slices) {
                    Ge::of(s, m)
                } else {
                    return Err(Rejection::StartUnsized {
                        attempt: AttemptName::of(key),
                    });
                };
                let (nominal, burst) = pool.policy_ge(&e.tenant);
                let action = pool
                    .policies
                    .get(&e.tenant)
                    .map_or(Enforcement::Alert, |p| p.enforcement);
                out.violation(
                    &e.pool,
                    &e.tenant,
                    Some((&e.job_id, e.attempt)),
                    &ge,
                    &(nominal + burst),
                    action,
                    "unadmitted_start",
                );
                unadmitted_ge = Some(ge);
            }
            let model = pool.inventory.shared_model();
            let (job_id, attempt) = pool
                .live
                .attempt_or_insert_with(key, || Attempt::new(tenant));
            attempt.phase = AttemptPhase::Running;
            attempt.started_at = Some(at);
            attempt.devices = devices;
            attempt.unadmitted_ge = unadmitted_ge.clone();
            let (kind, ge) = admitted
                .or(unadmitted_ge.map(|ge| (UseKind::Unadmitted, ge)))
                .unwrap_or((UseKind::Unadmitted, Ge::zero()));
            let job = (job_id, key.1);
            segments::open((&pool.name, model), job, attempt, kind, ge, at, out);
        }
        JobState::Cancelled if phase != Some(AttemptPhase::Running) => {
            // Cancelled before it started: just release the hold.
            pool.live
                .end(key, |_, attempt| end(attempt.as_deref(), key, e, records))
                .unwrap_or_else(|| end(None, key, e, records));
        }
        JobState::Completed | JobState::Failed | JobState::Cancelled | JobState::Preempted => {
            if phase != Some(AttemptPhase::Running) {
                return Err(Rejection::NeverStarted {
                    attempt: AttemptName::of(key),
                    state: e.state,
                });
            }
            if let Some(started) = started_at
                && at < started
            {
                return Err(Rejection::EndBeforeStart {
                    attempt: AttemptName::of(key),
                    state: e.state,
                    at,
                    started,
                });
            }
            let model = pool.inventory.shared_model();
            let name = &pool.name;
            // Hold and attempt out of the live state in one lookup, the
            // attempt's segment closed on the way.
            pool.live
                .end(key, |job_id, mut attempt| {
                    if let Some(attempt) = attempt.as_deref_mut() {
                        let ending = segments::Ending { at, event: e };
                        segments::close((name, model), (job_id, key.1), attempt, &ending, out);
                    }
                    end(attempt.as_deref(), key, e, records);
                })
                .unwrap_or_else(|| end(None, key, e, records));
        }
    }
    Ok(())
}

/// The attempt is over, and has left the live state (`attempt`, where it
/// was there) for the records, where its tenant is kept to reject what
/// comes after its end. Nothing may fail after this.
fn end(attempt: Option<&Attempt>, key: AttemptKey<'_>, e: &JobEvent, records: &mut Records) {
    let tenant = attempt.map_or(e.tenant.as_str(), |a| &a.tenant);
    records.ended.insert(&e.pool, key, tenant);
}

#[cfg(test)]
mod tests {
    use gpuledger_schemas::Event;

    use super::super::tests::{rejections, run};
    use super::super::tests_support::{T0, admit, base, job};
    use super::super::{Ledger, LedgerConfig, Outcome, Position, Rejection};

    #[test]
    fn an_attempt_admitted_after_its_end_cannot_start_also_after_a_snapshot() {
        let mut lines = base();
        lines.push(admit("a1", "team-a", "ja", 1, 1, T0));
        lines.push(job("ja", "team-a", "started", T0));
        lines.push(job("ja", "team-a", "completed", "2026-11-02T00:01:00Z"));
        // Admitted (DESIGN §4 does not refuse it), and held.
        lines.push(admit("a2", "team-a", "ja", 1, 1, "2026-11-02T00:02:00Z"));
        let start = job("ja", "team-a", "started", "2026-11-02T00:03:00Z");
        let mut ledger = Ledger::new(LedgerConfig::default());
        assert_eq!(rejections(&run(&mut ledger, &lines)), []);
        assert!(
            ledger
                .state
                .pools
                .get("p")
                .unwrap()
                .live
                .get(("ja", 1))
                .is_some()
        );

        let restored = Ledger::from_snapshot(&ledger.to_snapshot()).unwrap();
        for mut ledger in [ledger, restored] {
            let event = Event::from_json_str(&start).unwrap();
            let at = Position {
                partition: 0,
                offset: lines.len() as i64,
            };
            let Outcome::Rejected { reason } = ledger.apply(at, &event) else {
                panic!("a start after the end was applied");
            };
            assert!(matches!(reason, Rejection::AfterEnd { .. }), "{reason}");
        }
    }
}
