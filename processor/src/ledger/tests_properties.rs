//! Property tests of the state machine on random event sequences: the same
//! events always decide the same, a snapshot plus the tail equals a full
//! replay, and the sums the state keeps are the sums of what it holds.

use gpuledger_schemas::events::*;
use gpuledger_schemas::{Event, EventBody};
use proptest::prelude::*;

use super::tests::run;
use super::tests_support::*;
use super::*;

#[derive(Debug, Clone)]
enum Step {
    Admit {
        tenant: usize,
        job: usize,
        slices: i32,
        max: i32,
    },
    Start {
        job: usize,
        /// Minutes its time lags the ledger's.
        late_min: i64,
        /// The GPU it names, if any (health credits need one).
        gpu: Option<usize>,
    },
    End {
        job: usize,
        state: usize,
    },
    Reserve {
        tenant: usize,
        ge: i32,
        start_h: i64,
        len_h: i64,
    },
    Cancel {
        reservation: usize,
    },
    Fail {
        gpu: usize,
    },
    Heal {
        gpu: usize,
    },
    Tick,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (
            0..3usize,
            0..12usize,
            1..8i32,
            prop_oneof![Just(1), Just(7)]
        )
            .prop_map(|(tenant, job, slices, max)| Step::Admit {
                tenant,
                job,
                slices,
                max
            }),
        (
            0..12usize,
            prop_oneof![3 => Just(0i64), 1 => 1..90i64],
            proptest::option::of(0..8usize)
        )
            .prop_map(|(job, late_min, gpu)| Step::Start { job, late_min, gpu }),
        (0..12usize, 0..4usize).prop_map(|(job, state)| Step::End { job, state }),
        (0..3usize, 1..4i32, 0..48i64, 1..24i64).prop_map(|(tenant, ge, start_h, len_h)| {
            Step::Reserve {
                tenant,
                ge,
                start_h,
                len_h,
            }
        }),
        (0..8usize).prop_map(|reservation| Step::Cancel { reservation }),
        (0..8usize).prop_map(|gpu| Step::Fail { gpu }),
        (0..8usize).prop_map(|gpu| Step::Heal { gpu }),
        Just(Step::Tick),
    ]
}

const TENANTS: [&str; 3] = ["team-a", "team-b", "team-c"];

fn hour(h: i64) -> String {
    gpuledger_schemas::Timestamp::from_secs(1_793_577_600 + h * 3600).to_string()
}

/// Turns steps into ledger lines; time advances 20 minutes a step.
fn lines_of(steps: &[Step]) -> Vec<String> {
    let t0 = hour(0);
    // team-a has a money budget and team-b a GPU-hour budget that a busy
    // sequence crosses, so that budget watches are tried too (every event
    // checks that no watched figure crossed a line). The books price
    // another model first, cheaper: a watch must take its own pool's.
    let mut lines = vec![
        format!(
            r#"{{"type":"PriceBook",{},"version":1,"effective_from":"{t0}","currency":"USD","rates":[{{"model":"NVIDIA L4","reserved_per_gpu_hour":"0.25","quota_per_gpu_hour":"0.25","on_demand_per_gpu_hour":"0.25"}},{{"model":"NVIDIA H200","reserved_per_gpu_hour":"1.50","quota_per_gpu_hour":"2","on_demand_per_gpu_hour":"3.25"}}],"storage_per_gb_month":"0","egress_per_gb":"0","overhead_pct":"10","reservation_charge":"window","idle_distribution":"central"}}"#,
            env("book-1", &t0)
        ),
        // A book announced ahead takes over at hour 8: other rates, more
        // overhead on the whole month so far, reservations charged by use.
        format!(
            r#"{{"type":"PriceBook",{},"version":2,"effective_from":"{}","currency":"USD","rates":[{{"model":"NVIDIA L4","reserved_per_gpu_hour":"0.25","quota_per_gpu_hour":"0.25","on_demand_per_gpu_hour":"0.25"}},{{"model":"NVIDIA H200","reserved_per_gpu_hour":"1.25","quota_per_gpu_hour":"2.50","on_demand_per_gpu_hour":"3"}}],"storage_per_gb_month":"0","egress_per_gb":"0","overhead_pct":"30","reservation_charge":"usage","idle_distribution":"central"}}"#,
            env("book-2", &t0),
            hour(8)
        ),
        inventory("p", 8, &t0),
        format!(
            r#"{{"type":"TenantPolicy",{},"pool":"p","tenant":"team-a","nominal_ge":"3","burst_ge":"2","monthly_budget":"60","enforcement":"alert"}}"#,
            env("pol-team-a", &t0)
        ),
        format!(
            r#"{{"type":"TenantPolicy",{},"pool":"p","tenant":"team-b","nominal_ge":"2","burst_ge":"1","monthly_gpu_hours":"15","enforcement":"alert"}}"#,
            env("pol-team-b", &t0)
        ),
    ];
    let mut reservations = 0;
    for (i, s) in steps.iter().enumerate() {
        let at = gpuledger_schemas::Timestamp::from_secs(1_793_577_600 + (i as i64 + 1) * 1200)
            .to_string();
        let id = format!("s{i}");
        lines.push(match s {
            Step::Admit {
                tenant,
                job,
                slices,
                max,
            } => admit(
                &id,
                TENANTS[*tenant],
                &format!("j{job}"),
                *slices,
                *max,
                &at,
            ),
            Step::Start {
                job: j,
                late_min,
                gpu,
            } => {
                // Some starts reach the ledger late: their time is behind `now`.
                let at = gpuledger_schemas::Timestamp::from_secs(
                    1_793_577_600 + (i as i64 + 1) * 1200 - late_min * 60,
                )
                .to_string();
                let line = job(&format!("j{j}"), TENANTS[j % 3], "started", &at);
                match gpu {
                    Some(g) => line.replacen(
                        r#""requested_slices""#,
                        &format!(r#""devices":["GPU-p-{g}"],"requested_slices""#),
                        1,
                    ),
                    None => line,
                }
            }
            Step::End { job: j, state } => job(
                &format!("j{j}"),
                TENANTS[j % 3],
                ["completed", "failed", "cancelled", "preempted"][*state],
                &at,
            ),
            Step::Reserve {
                tenant,
                ge,
                start_h,
                len_h,
            } => {
                reservations += 1;
                reserve(
                    &format!("res-{}", reservations - 1),
                    TENANTS[*tenant],
                    *ge,
                    &hour(*start_h),
                    &hour(start_h + len_h),
                    &at,
                )
            }
            Step::Cancel { reservation } => {
                cancel(&format!("res-{reservation}"), TENANTS[reservation % 3], &at)
            }
            Step::Fail { gpu } => health("failed", *gpu, &at),
            Step::Heal { gpu } => health("healthy", *gpu, &at),
            Step::Tick => clock(&at),
        });
    }
    lines
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn the_same_ledger_always_gives_the_same_decisions(steps in proptest::collection::vec(step(), 0..60)) {
        let lines = lines_of(&steps);
        let mut a = Ledger::new(LedgerConfig::default());
        let mut b = Ledger::new(LedgerConfig::default());
        prop_assert_eq!(run(&mut a, &lines), run(&mut b, &lines));
        prop_assert_eq!(a, b);
    }

    #[test]
    fn every_request_gets_exactly_one_decision(steps in proptest::collection::vec(step(), 0..60)) {
        let lines = lines_of(&steps);
        let mut ledger = Ledger::new(LedgerConfig::default());
        let outcomes = run(&mut ledger, &lines);
        for (line, outcome) in lines.iter().zip(&outcomes) {
            let event = Event::from_json_str(line).unwrap();
            let Outcome::Applied { decisions, .. } = outcome else { continue };
            match &event.body {
                EventBody::AdmissionRequest(r) => {
                    let answers = decisions.iter().filter(|d| matches!(&d.body, EventBody::AdmissionDecision(a) if a.request_id == r.request_id)).count();
                    prop_assert_eq!(answers, 1);
                }
                EventBody::ReservationRequest(r) => {
                    let answers = decisions.iter().filter(|d| matches!(&d.body, EventBody::ReservationDecision(x) if x.reservation_id == r.reservation_id)).count();
                    prop_assert_eq!(answers, 1);
                }
                _ => {}
            }
        }
    }

    #[test]
    fn a_snapshot_plus_the_tail_equals_a_full_replay(steps in proptest::collection::vec(step(), 0..60), cut in 0usize..70) {
        let lines = lines_of(&steps);
        let cut = cut.min(lines.len());
        let mut full = Ledger::new(LedgerConfig::default());
        let all = run(&mut full, &lines);
        let mut head = Ledger::new(LedgerConfig::default());
        run(&mut head, &lines[..cut]);
        let mut restored = Ledger::from_snapshot(&head.to_snapshot()).unwrap();
        prop_assert_eq!(&restored, &head);
        let tail: Vec<Outcome> = lines[cut..]
            .iter()
            .enumerate()
            .map(|(i, line)| restored.apply(Position { partition: 0, offset: (cut + i) as i64 }, &Event::from_json_str(line).unwrap()))
            .collect();
        prop_assert_eq!(&tail[..], &all[cut..]);
        prop_assert_eq!(restored, full);
    }

    #[test]
    fn confirmed_reservations_never_exceed_spare_and_use_is_never_negative(steps in proptest::collection::vec(step(), 0..60)) {
        let lines = lines_of(&steps);
        let mut ledger = Ledger::new(LedgerConfig::default());
        for (offset, line) in lines.iter().enumerate() {
            let event = Event::from_json_str(line).unwrap();
            ledger.apply(Position { partition: 0, offset: offset as i64 }, &event);
            let Some(pool) = ledger.state.pools.get("p") else { continue };
            // Policies are fixed here, so spare at decision time is spare now
            // (capacity changes with health, nominal does not: spare counts
            // nominal against the inventory's capacity at decision time).
            let nominal: Ge = pool.policies.values().map(|p| Ge::from_decimal(&p.nominal_ge)).sum();
            let all_gpus = Ge::of(8, 1);
            let confirmed: Vec<&Reservation> = pool.reservations.values().filter(|r| r.confirmed).collect();
            for r in &confirmed {
                let booked: Ge = confirmed.iter().filter(|o| o.start <= r.start && r.start < o.effective_end()).map(|o| o.ge.clone()).sum();
                prop_assert!(booked <= all_gpus.clone() - nominal.clone(), "{booked} booked at {}", r.start);
            }
            for tenant in TENANTS {
                for kind in HoldKind::ALL {
                    let used = pool.use_of(tenant, *kind);
                    prop_assert!(!used.to_rational().is_negative());
                    // The kept sum is the sum of the holds.
                    let counted: Ge = pool.live.values().filter(|h| *h.tenant == *tenant && h.kind == *kind).map(|h| h.ge.clone()).sum();
                    prop_assert_eq!(used, counted);
                }
            }
            let all: Ge = pool.live.values().map(|h| h.ge.clone()).sum();
            prop_assert_eq!(pool.live.total(), &all);
        }
    }
}
