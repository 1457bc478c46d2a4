//! Scenario tests of the state machine, the worked example of DESIGN §12,
//! and property tests on random event sequences.

use gpuledger_schemas::{Event, EventBody};

use super::*;

/// Feeds JSON lines in order, one offset each, and returns every outcome.
/// Checks on the way the promises the ledger makes without checking them
/// itself: a rejected event leaves the ledger as it was, and the budget
/// watch, a cache, changes no outcome (the same events are applied beside
/// it to a copy that prices every budget after every event).
pub(super) fn run(ledger: &mut Ledger, lines: &[String]) -> Vec<Outcome> {
    let mut unwatched = ledger.clone();
    unwatched.state.config.budget_watch = false;
    unwatched.state.budget_watch.clear();
    lines
        .iter()
        .enumerate()
        .map(|(offset, line)| {
            let event = Event::from_json_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
            let position = Position {
                partition: 0,
                offset: offset as i64,
            };
            let before = ledger.clone();
            let outcome = ledger.apply(position, &event);
            if let Outcome::Rejected { reason } = &outcome {
                assert!(
                    before == *ledger,
                    "a rejected event changed the state: {reason}"
                );
            }
            assert_eq!(
                as_priced(unwatched.apply(position, &event)),
                as_priced(outcome.clone()),
                "the budget watch changed the outcome of {line}"
            );
            outcome
        })
        .collect()
}

/// `outcome` with each budget denial's reason cut to the budget it names.
/// A denial gives the month-to-date figure as of its pricing, which it
/// states: under a watch, the pricing that found the budget spent; without
/// one, the denial's own time. The decision and the budget are the same.
fn as_priced(mut outcome: Outcome) -> Outcome {
    if let Outcome::Applied { decisions, .. } = &mut outcome {
        for d in decisions.iter_mut() {
            if let EventBody::AdmissionDecision(a) = &d.body
                && let Some((budget, _)) = a.reason.split_once(" month-to-date ")
                && a.reason.starts_with("budget_exhausted:")
            {
                let mut priced = Event::clone(d);
                if let EventBody::AdmissionDecision(a) = &mut priced.body {
                    a.reason = budget.into();
                }
                *d = Arc::new(priced);
            }
        }
    }
    outcome
}

/// [`run`], every line accepted (the rejections' reasons otherwise).
pub(super) fn run_accepted(ledger: &mut Ledger, lines: &[String]) -> Vec<Outcome> {
    let outcomes = run(ledger, lines);
    assert!(
        rejections(&outcomes).is_empty(),
        "{:?}",
        rejections(&outcomes)
    );
    outcomes
}

pub(super) fn decisions(outcomes: &[Outcome]) -> Vec<Event> {
    outcomes
        .iter()
        .flat_map(|o| match o {
            Outcome::Applied { decisions, .. } => {
                decisions.iter().map(|d| Event::clone(d)).collect()
            }
            _ => Vec::new(),
        })
        .collect()
}

pub(super) fn rejections(outcomes: &[Outcome]) -> Vec<Rejection> {
    outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Rejected { reason } => Some(reason.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn the_worked_example_gives_the_published_decisions() {
    let dir = shared_examples();
    let ledger_text = std::fs::read_to_string(format!("{dir}/mig-quota-basics.ndjson"))
        .expect("the shared example");
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{dir}/mig-quota-basics.decisions.json")).unwrap(),
    )
    .unwrap();
    let lines: Vec<String> = ledger_text.lines().map(str::to_owned).collect();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let outcomes = run_accepted(&mut ledger, &lines);
    let got: Vec<serde_json::Value> = decisions(&outcomes)
        .iter()
        .map(|d| {
            let EventBody::AdmissionDecision(a) = &d.body else {
                panic!("unexpected decision {d:?}");
            };
            serde_json::json!({
                "type": "AdmissionDecision",
                "request_id": a.request_id, "job_id": a.job_id, "attempt": a.attempt,
                "tenant": a.tenant, "pool": a.pool, "slices": a.slices, "max_slices": a.max_slices,
                "decision": a.decision.as_str(), "kind": a.kind.map(|k| k.as_str()), "reason": a.reason,
                "entitled_ge": a.entitled_ge.to_string(), "used_ge": a.used_ge.to_string(),
                "at": d.envelope.event_time.to_string(), "offset": a.ledger_offset, "event_id": a.cause_event_id,
            })
        })
        .collect();
    assert_eq!(got, expected["decisions"].as_array().unwrap().clone());
    assert_eq!(
        ledger.now().unwrap().to_string(),
        expected["final_now"].as_str().unwrap()
    );
}

use super::tests_support::*;

fn summarize(d: &Event) -> String {
    match &d.body {
        EventBody::AdmissionDecision(a) => format!(
            "admission {} {} {} {} entitled={} used={}",
            a.request_id,
            a.decision,
            a.kind.map_or("-", |k| k.as_str()),
            a.reason,
            a.entitled_ge,
            a.used_ge
        ),
        EventBody::ReservationDecision(r) => {
            format!("reservation {} {}", r.reservation_id, r.decision)
        }
        EventBody::BurstTriggered(b) => format!(
            "burst {} {}/{} billed_as={}",
            b.tenant, b.slices, b.max_slices, b.billed_as
        ),
        EventBody::Reclassified(r) => format!(
            "reclassified {} {}→{} at {}",
            r.job_id, r.from_kind, r.to_kind, r.at
        ),
        EventBody::QuotaViolation(q) => format!(
            "violation {} {} observed={}",
            q.tenant, q.reason, q.observed_ge
        ),
        EventBody::UnmeteredUsage(u) => format!("unmetered {}", u.device_uuid),
        other => format!("{other:?}"),
    }
}

fn scenario(lines: Vec<String>) -> (Vec<String>, Vec<Rejection>) {
    let mut ledger = Ledger::new(LedgerConfig::default());
    let outcomes = run(&mut ledger, &lines);
    (
        decisions(&outcomes).iter().map(summarize).collect(),
        rejections(&outcomes),
    )
}

#[test]
fn admission_goes_quota_then_burst_then_deny() {
    let mut lines = base();
    lines.push(admit("r1", "team-a", "j1", 3, 1, T0));
    lines.push(admit("r2", "team-a", "j2", 2, 1, T0));
    lines.push(admit("r3", "team-a", "j3", 2, 1, T0));
    lines.push(admit("r4", "team-c", "j4", 1, 7, T0));
    let (got, rejected) = scenario(lines);
    assert!(rejected.is_empty(), "{rejected:?}");
    assert_eq!(
        got,
        [
            "admission r1 admit quota within_quota entitled=4 used=0",
            // 2 > 4 − 3: burst; spare 2 covers it, no on-demand needed.
            "admission r2 admit burst burst entitled=2 used=0",
            "admission r3 deny - quota_exceeded entitled=6 used=5",
            // A tenant with no policy has nominal 0 and burst 0.
            "admission r4 deny - quota_exceeded entitled=0 used=0",
        ]
    );
}

#[test]
fn burst_beyond_free_spare_triggers_on_demand_for_the_shortfall() {
    let mut lines = base();
    lines.push(admit("a1", "team-a", "ja", 2, 1, T0)); // quota
    lines.push(admit("a2", "team-a", "jb", 2, 1, T0)); // quota (4 of 4)
    lines.push(admit("a3", "team-a", "jc", 2, 1, T0)); // burst: free spare 2
    lines.push(admit("b1", "team-b", "jd", 2, 1, T0)); // quota
    lines.push(admit("b2", "team-b", "je", 1, 1, T0)); // burst: free spare 0 → on-demand 1
    let (got, rejected) = scenario(lines);
    assert!(rejected.is_empty(), "{rejected:?}");
    assert_eq!(got[2], "admission a3 admit burst burst entitled=2 used=0");
    assert_eq!(got[4], "admission b2 admit burst burst entitled=1 used=0");
    assert_eq!(got[5], "burst team-b 1/1 billed_as=burst");
    assert_eq!(got.len(), 6);
}

#[test]
fn failed_hardware_short_of_an_entitled_admission_is_billed_as_the_entitlement() {
    let mut lines = base();
    lines.push(admit("a1", "team-a", "ja", 3, 1, T0));
    for gpu in 0..4 {
        lines.push(health("failed", gpu, T0));
    }
    // Capacity 4, holds 3: team-b's quota of 2 is short by 1.
    lines.push(admit("b1", "team-b", "jb", 2, 1, T0));
    let (got, _) = scenario(lines);
    assert_eq!(
        got[1],
        "admission b1 admit quota within_quota entitled=2 used=0"
    );
    assert_eq!(got[2], "burst team-b 1/1 billed_as=quota");
}

#[test]
fn reservations_never_double_book_spare() {
    let mut lines = base();
    lines.push(reserve(
        "res-1",
        "team-a",
        2,
        "2026-11-03T00:00:00Z",
        "2026-11-05T00:00:00Z",
        T0,
    ));
    lines.push(reserve(
        "res-2",
        "team-b",
        1,
        "2026-11-04T00:00:00Z",
        "2026-11-06T00:00:00Z",
        T0,
    ));
    lines.push(reserve(
        "res-3",
        "team-b",
        1,
        "2026-11-05T00:00:00Z",
        "2026-11-06T00:00:00Z",
        T0,
    ));
    lines.push(reserve(
        "res-4",
        "team-b",
        1,
        "2026-10-01T00:00:00Z",
        "2026-11-01T00:00:00Z",
        T0,
    ));
    let mut ledger = Ledger::new(LedgerConfig::default());
    let outcomes = run(&mut ledger, &lines);
    let got: Vec<Event> = decisions(&outcomes);
    assert_eq!(summarize(&got[0]), "reservation res-1 confirmed");
    assert_eq!(summarize(&got[1]), "reservation res-2 rejected");
    let EventBody::ReservationDecision(r) = &got[1].body else {
        unreachable!()
    };
    assert_eq!(
        r.reason,
        "conflict over [2026-11-04T00:00:00Z, 2026-11-05T00:00:00Z): 2 GE booked by res-1 + 1 GE requested exceeds spare 2 GE"
    );
    // Back to back with res-1 is fine: windows are [start, end).
    assert_eq!(summarize(&got[2]), "reservation res-3 confirmed");
    let EventBody::ReservationDecision(r) = &got[3].body else {
        unreachable!()
    };
    assert!(r.reason.starts_with("window_over"), "{}", r.reason);
}

#[test]
fn a_window_moves_holds_to_reserved_and_back_at_its_end() {
    let mut lines = base();
    lines.push(reserve(
        "res-1",
        "team-a",
        2,
        "2026-11-02T06:00:00Z",
        "2026-11-02T12:00:00Z",
        T0,
    ));
    lines.push(admit("a1", "team-a", "ja", 3, 1, T0)); // quota
    lines.push(job("ja", "team-a", "started", T0));
    lines.push(admit("a2", "team-a", "jb", 1, 1, T0)); // quota (4 of 4)
    lines.push(job("jb", "team-a", "started", T0));
    lines.push(admit("a3", "team-a", "jc", 1, 1, "2026-11-02T01:00:00Z")); // burst
    lines.push(job("jc", "team-a", "started", "2026-11-02T01:00:00Z"));
    lines.push(clock("2026-11-02T07:00:00Z"));
    lines.push(clock("2026-11-02T13:00:00Z"));
    let (got, rejected) = scenario(lines);
    assert!(rejected.is_empty(), "{rejected:?}");
    assert_eq!(
        got[4..],
        [
            // Burst first, then quota, oldest admission first, while each fits 2 GE.
            "reclassified jc burst→reserved at 2026-11-02T06:00:00Z",
            "reclassified jb quota→reserved at 2026-11-02T06:00:00Z",
            // At the end, oldest admission first: jb fits nominal (3 of 4
            // used) and goes to quota; jc no longer fits it and goes to burst.
            "reclassified jb reserved→quota at 2026-11-02T12:00:00Z",
            "reclassified jc reserved→burst at 2026-11-02T12:00:00Z",
        ]
    );
}

#[test]
fn a_cancel_ends_the_window_at_once() {
    let mut lines = base();
    lines.push(reserve(
        "res-1",
        "team-b",
        1,
        T0,
        "2026-11-03T00:00:00Z",
        T0,
    ));
    lines.push(admit("b1", "team-b", "jb", 1, 1, T0));
    lines.push(job("jb", "team-b", "started", T0));
    lines.push(cancel("res-1", "team-b", "2026-11-02T05:00:00Z"));
    lines.push(
        cancel("res-1", "team-b", "2026-11-02T06:00:00Z")
            .replace("res-1-cancel", "res-1-cancel-again"),
    );
    let (got, rejected) = scenario(lines);
    assert_eq!(
        got,
        [
            "reservation res-1 confirmed",
            "admission b1 admit reserved within_reservation entitled=1 used=0",
            "reservation res-1 cancelled",
            "reclassified jb reserved→quota at 2026-11-02T05:00:00Z",
        ]
    );
    assert_eq!(
        rejected,
        [Rejection::ReservationOver {
            reservation_id: "res-1".into()
        }]
    );
}

#[test]
fn a_start_after_the_hold_expired_is_unadmitted_use() {
    let mut lines = base();
    lines.push(admit("a1", "team-a", "ja", 1, 1, T0));
    // Exactly decision + 15 min is after expiry.
    lines.push(job("ja", "team-a", "started", "2026-11-02T00:15:00Z"));
    let (got, rejected) = scenario(lines);
    assert!(rejected.is_empty(), "{rejected:?}");
    assert_eq!(got[1], "violation team-a unadmitted_start observed=1");
}

#[test]
fn contradictions_are_rejected_and_change_nothing() {
    let mut lines = base();
    lines.push(job("never", "team-a", "completed", T0));
    lines.push(
        admit("x", "team-a", "j", 1, 1, "2026-11-09T00:00:00Z")
            .replace(r#""pool":"p""#, r#""pool":"nowhere""#),
    );
    lines.push(admit("a1", "team-a", "ja", 1, 1, T0));
    lines.push(job("ja", "team-b", "started", T0));
    lines.push(job("ja", "team-a", "started", T0));
    lines.push(job("ja", "team-a", "completed", T0));
    lines.push(job("ja", "team-a", "failed", "2026-11-02T00:01:00Z"));
    let mut ledger = Ledger::new(LedgerConfig::default());
    let outcomes = run(&mut ledger, &lines);
    let rejected = rejections(&outcomes);
    assert_eq!(rejected.len(), 4, "{rejected:?}");
    assert!(
        matches!(&rejected[0], Rejection::NeverStarted { .. }),
        "{}",
        rejected[0]
    );
    assert_eq!(
        rejected[1],
        Rejection::UnknownPool {
            pool: "nowhere".into()
        }
    );
    assert!(
        matches!(
            &rejected[2],
            Rejection::TenantMismatch { tenant, .. } | Rejection::AdmissionTenantMismatch { tenant, .. }
                if tenant == "team-b"
        ),
        "{}",
        rejected[2]
    );
    assert!(
        matches!(&rejected[3], Rejection::AfterEnd { .. }),
        "{}",
        rejected[3]
    );
    // The rejected admission at 2026-11-09 did not move time.
    assert_eq!(ledger.now().unwrap().to_string(), T0);
}

#[test]
fn a_device_the_pool_does_not_list_is_rejected_by_name() {
    let with_devices = |line: String, devices: &str| {
        line.replace(r#""state":"#, &format!(r#""devices":[{devices}],"state":"#))
    };
    let mut lines = base();
    lines.push(admit("a1", "team-a", "ja", 1, 1, T0));
    // A start that also names an unknown device, then a terminal event
    // that names one: both rejected, naming it; the known start applies.
    let start = job("ja", "team-a", "started", T0);
    lines.push(with_devices(start.clone(), r#""GPU-p-1","GPU-elsewhere""#));
    lines.push(with_devices(start, r#""GPU-p-1""#));
    let end = job("ja", "team-a", "completed", "2026-11-02T01:00:00Z");
    lines.push(with_devices(end.clone(), r#""GPU-gone""#));
    lines.push(end);
    let mut ledger = Ledger::new(LedgerConfig::default());
    let rejected = rejections(&run(&mut ledger, &lines));
    assert_eq!(rejected.len(), 2, "{rejected:?}");
    for (rejection, named) in rejected.iter().zip(["GPU-elsewhere", "GPU-gone"]) {
        assert!(
            matches!(rejection, Rejection::UnknownDevice { device, .. } if device == named),
            "{rejection}"
        );
        assert!(rejection.to_string().contains("inventory"), "{rejection}");
    }
}

#[test]
fn duplicates_and_retried_requests() {
    let mut lines = base();
    lines.push(admit("a1", "team-a", "ja", 1, 1, T0));
    lines.push(admit("a1", "team-a", "ja", 1, 1, T0)); // same event_id: ignored
    let mut retry = admit("a1", "team-a", "ja", 1, 1, T0);
    retry = retry.replace(r#""event_id":"a1""#, r#""event_id":"a1-retry""#);
    lines.push(retry); // same request, new event: the original answer again
    let mut changed = admit("a1", "team-a", "ja", 2, 1, T0);
    changed = changed.replace(r#""event_id":"a1""#, r#""event_id":"a1-other""#);
    lines.push(changed); // same request_id, other content: rejected
    let mut ledger = Ledger::new(LedgerConfig::default());
    let outcomes = run(&mut ledger, &lines);
    assert_eq!(outcomes[4], Outcome::Duplicate);
    let first = decisions(&outcomes[3..4]);
    let again = decisions(&outcomes[5..6]);
    assert_eq!(first, again);
    assert!(matches!(
        &outcomes[6],
        Outcome::Rejected {
            reason: Rejection::AdmissionChanged { .. }
        }
    ));
}

/// The published examples of DESIGN §12, looked up when the test runs
/// (cargo sets `CARGO_MANIFEST_DIR` for it), so a build cached in one
/// checkout still reads the examples beside the one running it.
pub(super) fn shared_examples() -> String {
    let crate_dir = std::env::var("CARGO_MANIFEST_DIR")
        .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_owned());
    format!("{crate_dir}/../../shared/examples")
}
