//! Admission (DESIGN §4): budget → reserved → quota → burst → deny, with
//! holds, and on-demand capacity asked for when spare or hardware falls short.

use std::sync::{Arc, LazyLock};

use gpuledger_schemas::events::{AdmissionOutcome, AdmissionRequest, HoldKind};

use gpuledger_schemas::{Event, EventBody, Text};

use super::decide::Decisions;
use super::state::pool_in;
use super::store::Records;
use super::store::decided::Lookup;
use super::{AttemptName, Ge, Hold, Rejection, State, budgets};
use gpuledger_collections::by_name::same_text;

/// The reasons an admission gives when no budget is spent.
#[derive(Debug, Clone, Copy)]
enum Reason {
    WithinReservation,
    WithinQuota,
    Burst,
    QuotaExceeded,
}

/// `reason`'s text, one shared by every decision that gives it.
fn shared(reason: Reason) -> Text {
    static TEXTS: LazyLock<[Text; 4]> = LazyLock::new(|| {
        [
            "within_reservation",
            "within_quota",
            "burst",
            "quota_exceeded",
        ]
        .map(Text::from)
    });
    TEXTS[reason as usize].clone()
}

/// What a retry must repeat exactly: everything the request asks but its
/// id, as the decision answering it records it. Otherwise, what the
/// decision records, to name in the rejection.
fn same_request(r: &AdmissionRequest, decision: &Event) -> Result<(), String> {
    let EventBody::AdmissionDecision(d) = &decision.body else {
        return Err("its decision is not an admission decision".to_owned());
    };
    let asked = (
        &r.pool,
        &r.job_id,
        r.attempt,
        &r.tenant,
        r.slices,
        r.max_slices,
    );
    let decided = (
        &d.pool,
        &d.job_id,
        d.attempt,
        &d.tenant,
        d.slices,
        d.max_slices,
    );
    if asked == decided {
        return Ok(());
    }
    Err(format!(
        "{}|{}|{}|{}|{}|{}",
        d.pool, d.job_id, d.attempt, d.tenant, d.slices, d.max_slices
    ))
}

pub(crate) fn request(
    state: &mut State,
    r: &AdmissionRequest,
    records: &mut Records,
    out: &mut Decisions<'_>,
) -> Result<(), Rejection> {
    let now = state.current();
    let hold_ttl = state.config.hold_ttl_micros;
    let seq = state.next_admission_seq + 1;
    let watch = state
        .budget_watch
        .get(&r.pool, &r.tenant)
        .filter(|w| now < w.until());
    let pool = pool_in(&mut state.pools, &r.pool)?;
    let absent = match records.decided.lookup(&r.pool, &r.request_id) {
        Lookup::New(absent) => absent,
        Lookup::Decided(decision) => {
            return match same_request(r, &decision) {
                Ok(()) => {
                    out.repeat(decision);
                    Ok(())
                }
                Err(seen) => Err(Rejection::AdmissionChanged {
                    request_id: r.request_id.to_string(),
                    seen,
                }),
            };
        }
    };
    let key = (r.job_id.as_str(), r.attempt);
    let live = pool.live.find(key);
    if live.hold.is_some() {
        return Err(Rejection::AlreadyAdmitted {
            attempt: AttemptName::of(key),
        });
    }
    let ended_tenant = match live.attempt {
        Some(_) => None,
        None => records.ended.get(&r.pool, key),
    };
    let after_end = ended_tenant.is_some();
    let known_tenant = live.attempt.map(|a| &*a.tenant).or(ended_tenant);
    if let Some(tenant) = known_tenant
        && !same_text(tenant, &r.tenant)
    {
        return Err(Rejection::TenantMismatch {
            tenant: r.tenant.to_string(),
            attempt: AttemptName::of(key),
            known: tenant.to_owned(),
        });
    }

    let g = Ge::of(r.slices, r.max_slices);
    let policy = pool.policies.with_ge(&r.tenant);
    let (nominal, burst_ge) =
        policy.map_or((Ge::zero(), Ge::zero()), |(_, n, b)| (n.clone(), b.clone()));
    let reserved = pool.active_reserved(&r.tenant, now);
    let (reserved_use, quota_use, burst_use) = pool.live.uses_of(&r.tenant);

    let budget_spent =
        policy.and_then(|(p, _, _)| budgets::exhausted(&records.billing, p, now, watch));
    let (kind, entitled, used, reason) = if let Some(reason) = budget_spent {
        (None, nominal + burst_ge, quota_use + burst_use, reason)
    } else if g <= reserved.clone() - reserved_use.clone() {
        (
            Some(HoldKind::Reserved),
            reserved,
            reserved_use,
            shared(Reason::WithinReservation),
        )
    } else if g <= nominal.clone() - quota_use.clone() {
        (
            Some(HoldKind::Quota),
            nominal,
            quota_use,
            shared(Reason::WithinQuota),
        )
    } else if g <= burst_ge.clone() - burst_use.clone() {
        (
            Some(HoldKind::Burst),
            burst_ge,
            burst_use,
            shared(Reason::Burst),
        )
    } else {
        (
            None,
            nominal + burst_ge,
            quota_use + burst_use,
            shared(Reason::QuotaExceeded),
        )
    };

    let Some(kind) = kind else {
        let (decision, index) =
            out.admission(r, AdmissionOutcome::Deny, None, reason, &entitled, &used);
        records
            .decided
            .insert_absent(&r.pool, &r.request_id, absent, decision, index);
        return Ok(());
    };

    // What on-demand capacity must cover.
    let capacity = pool.inventory.capacity();
    let all_holds = pool.live.total().clone();
    let shortfall = match kind {
        HoldKind::Burst => {
            let active_reservations: Ge = pool
                .reservations
                .values()
                .filter(|res| res.active_at(now))
                .map(|res| res.ge.clone())
                .sum();
            let burst_holds = pool.live.burst_total().clone();
            let free_spare = (pool.spare() - active_reservations - burst_holds).clamp_zero();
            g.clone() - free_spare
        }
        // Entitled use: only failed hardware can leave it short.
        HoldKind::Reserved | HoldKind::Quota => g.clone() - (capacity - all_holds).clamp_zero(),
    };

    let (decision, index) = out.admission(
        r,
        AdmissionOutcome::Admit,
        Some(kind),
        reason,
        &entitled,
        &used,
    );
    records
        .decided
        .insert_absent(&r.pool, &r.request_id, absent, decision, index);
    if shortfall.is_positive() {
        out.burst(
            &r.pool,
            &r.tenant,
            Some((&r.job_id, r.attempt)),
            &shortfall,
            kind,
        );
    }
    // A hold for this attempt was rejected above.
    pool.live.insert_new(
        key,
        Hold {
            request_id: r.request_id.clone(),
            tenant: Arc::clone(r.tenant.as_arc()),
            ge: g,
            kind,
            admitted_seq: seq,
            expires_at: Some(now.plus_micros(hold_ttl)),
            after_end,
        },
    );
    state.take_admission_seq();
    Ok(())
}
