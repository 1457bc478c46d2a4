//! Statement rules, each on a small hand-worked case. Pool `p` holds four
//! whole GPUs of model `M` from October 1; the book prices reserved 2.00,
//! quota 3.00 and on-demand 5.00 per GPU-hour.

use super::*;
use crate::Event;
use crate::events::JobState;

fn ts(text: &str) -> Timestamp {
    text.parse().unwrap()
}

fn event(json: &str) -> Event {
    Event::from_json_str(json).unwrap_or_else(|e| panic!("{json}: {e}"))
}

fn book(version: i64, from: &str, quota: &str, charge: &str, idle: &str, overhead: &str) -> Event {
    event(&format!(
        r#"{{"type":"PriceBook","event_id":"book-{version}","event_time":"{from}","source":"t","cluster":"c","version":{version},"effective_from":"{from}","currency":"USD","rates":[{{"model":"M","reserved_per_gpu_hour":"2.00","quota_per_gpu_hour":"{quota}","on_demand_per_gpu_hour":"5.00"}}],"storage_per_gb_month":"0.10","egress_per_gb":"0.05","overhead_pct":"{overhead}","reservation_charge":"{charge}","idle_distribution":"{idle}"}}"#
    ))
}

fn base(charge: &str, idle: &str) -> Facts {
    let mut facts = Facts::new();
    facts
        .observe(&book(1, "2026-10-01T00:00:00Z", "3.00", charge, idle, "0"))
        .unwrap();
    let devices: Vec<String> = (1..=4)
        .map(|i| {
            format!(
                r#"{{"device_uuid":"G{i}","model":"M","slices":7,"max_slices":7,"memory_bytes":1}}"#
            )
        })
        .collect();
    facts
        .observe(&event(&format!(
            r#"{{"type":"NodeInventory","event_id":"inv","event_time":"2026-10-01T00:00:00Z","source":"t","cluster":"c","pool":"p","node":"n1","devices":[{}]}}"#,
            devices.join(",")
        )))
        .unwrap();
    facts
}

#[allow(clippy::too_many_arguments)]
fn segment(
    tenant: &str,
    job: &str,
    attempt: i32,
    kind: UseKind,
    ge: (i64, i64),
    devices: &[&str],
    start: &str,
    end: Option<&str>,
    state: Option<JobState>,
) -> Segment {
    Segment {
        pool: "p".into(),
        tenant: tenant.into(),
        job_id: job.into(),
        attempt,
        kind,
        slices: ge.0,
        max_slices: ge.1,
        model: "M".into(),
        devices: devices.iter().map(|&d| d.into()).collect(),
        start: ts(start),
        end: end.map(ts),
        final_state: state,
        work_units: None,
        work_unit_name: None,
    }
}

fn line(statement: &Statement, tenant: &str, line: StatementLine) -> String {
    statement
        .tenants
        .iter()
        .find(|t| t.tenant == tenant)
        .unwrap_or_else(|| panic!("no tenant {tenant}"))
        .line(line)
        .to_string()
}

fn november(facts: &Facts, now: &str) -> Statement {
    let statement = statement(facts, "2026-11".parse().unwrap(), ts(now)).unwrap();
    charges_add_up(&statement);
    statement
}

/// Every line (but `total`) is the sum of its charges' billed amounts, and
/// each billed amount is within a cent of the charge's exact amount.
fn charges_add_up(statement: &Statement) {
    for t in &statement.tenants {
        for (line, amount) in &t.lines {
            if *line == StatementLine::Total {
                continue;
            }
            let charges: Vec<_> = t.charges.iter().filter(|c| c.line == *line).collect();
            let billed: Rational = charges.iter().map(|c| c.billed.to_rational()).sum();
            assert_eq!(billed, amount.to_rational(), "{} {line:?}", t.tenant);
            for c in charges {
                let off = c.billed.to_rational() - c.amount.clone();
                let off = off.clone().max(-off);
                assert!(off < "0.01".parse().unwrap(), "{c:?}");
            }
        }
        let kinds: std::collections::BTreeSet<_> = t.charges.iter().map(|c| c.line).collect();
        assert!(!kinds.contains(&StatementLine::Total));
    }
}

fn reservation(facts: &mut Facts) {
    facts
        .observe(&event(
            r#"{"type":"ReservationDecision","event_id":"d1","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","pool":"p","reservation_id":"r1","tenant":"a","slices":2,"max_slices":1,"start":"2026-11-01T10:00:00Z","end":"2026-11-01T14:00:00Z","decision":"confirmed","reason":"","ledger_partition":0,"ledger_offset":0,"cause_event_id":"x"}"#,
        ))
        .unwrap();
    facts.segment(segment(
        "a",
        "j1",
        1,
        UseKind::Reserved,
        (1, 1),
        &["G1"],
        "2026-11-01T11:00:00Z",
        Some("2026-11-01T13:00:00Z"),
        Some(JobState::Completed),
    ));
}

#[test]
fn reservation_unused_is_charged_by_window() {
    let mut facts = base("window", "central");
    reservation(&mut facts);
    let s = november(&facts, "2026-11-02T00:00:00Z");
    // 1 GE × 2 h × 2.00.
    assert_eq!(line(&s, "a", StatementLine::ComputeReserved), "4.00");
    // (2 GE × 1 h + 1 GE × 2 h + 2 GE × 1 h) × 2.00.
    assert_eq!(line(&s, "a", StatementLine::ReservationUnused), "12.00");
    assert_eq!(line(&s, "a", StatementLine::Total), "16.00");
    // (4 GE × 24 h − 2 held − 6 reserved unused) × 3.00.
    assert_eq!(s.platform.unallocated.to_string(), "264.00");
}

#[test]
fn under_usage_charge_unused_reservations_are_unallocated() {
    let mut facts = base("usage", "central");
    reservation(&mut facts);
    let s = november(&facts, "2026-11-02T00:00:00Z");
    assert_eq!(line(&s, "a", StatementLine::ReservationUnused), "0.00");
    assert_eq!(line(&s, "a", StatementLine::Total), "4.00");
    assert_eq!(s.platform.unallocated.to_string(), "282.00");
}

#[test]
fn a_cancelled_reservation_stops_counting_at_its_cancel() {
    let mut facts = base("window", "central");
    reservation(&mut facts);
    facts
        .observe(&event(
            r#"{"type":"ReservationDecision","event_id":"d2","event_time":"2026-11-01T12:00:00Z","source":"t","cluster":"c","pool":"p","reservation_id":"r1","tenant":"a","slices":2,"max_slices":1,"start":"2026-11-01T10:00:00Z","end":"2026-11-01T14:00:00Z","decision":"cancelled","reason":"","ledger_partition":0,"ledger_offset":1,"cause_event_id":"y"}"#,
        ))
        .unwrap();
    let s = november(&facts, "2026-11-02T00:00:00Z");
    // (2 GE × 1 h + 1 GE × 1 h) × 2.00.
    assert_eq!(line(&s, "a", StatementLine::ReservationUnused), "6.00");
}

#[test]
fn failed_devices_earn_a_credit_and_leave_capacity() {
    let mut facts = base("window", "central");
    facts.segment(segment(
        "a",
        "j1",
        1,
        UseKind::Quota,
        (2, 1),
        &["G1", "G2"],
        "2026-11-01T00:00:00Z",
        Some("2026-11-01T10:00:00Z"),
        Some(JobState::Completed),
    ));
    for (id, at, state) in [
        ("h1", "2026-11-01T04:00:00Z", "failed"),
        ("h2", "2026-11-01T06:00:00Z", "healthy"),
    ] {
        facts
            .observe(&event(&format!(
                r#"{{"type":"DeviceHealth","event_id":"{id}","event_time":"{at}","source":"t","cluster":"c","pool":"p","node":"n1","device_uuid":"G1","state":"{state}","reason":"xid 79"}}"#
            )))
            .unwrap();
    }
    let s = november(&facts, "2026-11-02T00:00:00Z");
    // 2 GE × 10 h × 3.00, and 1 failed GE × 2 h × 3.00 back.
    assert_eq!(line(&s, "a", StatementLine::ComputeQuota), "60.00");
    assert_eq!(line(&s, "a", StatementLine::HealthCredit), "-6.00");
    assert_eq!(line(&s, "a", StatementLine::Total), "54.00");
    // Free: 2 GE × 4 h + 1 × 2 + 2 × 4 + 4 × 14 = 74 GE-h × 3.00.
    assert_eq!(s.platform.unallocated.to_string(), "222.00");
}

#[test]
fn a_price_change_and_a_month_boundary_split_segments() {
    let mut facts = base("window", "central");
    facts
        .observe(&book(
            2,
            "2026-11-15T00:00:00Z",
            "4.00",
            "window",
            "central",
            "0",
        ))
        .unwrap();
    let mut s = segment(
        "a",
        "j1",
        1,
        UseKind::Quota,
        (1, 1),
        &["G1"],
        "2026-10-31T12:00:00Z",
        Some("2026-11-15T12:00:00Z"),
        Some(JobState::Completed),
    );
    s.work_units = Some("10".parse().unwrap());
    s.work_unit_name = Some("epochs".into());
    facts.segment(s);
    let nov = november(&facts, "2026-12-01T00:00:00Z");
    // 336 h × 3.00 + 12 h × 4.00.
    assert_eq!(line(&nov, "a", StatementLine::ComputeQuota), "1056.00");
    let oct = statement(
        &facts,
        "2026-10".parse().unwrap(),
        ts("2026-12-01T00:00:00Z"),
    )
    .unwrap();
    // 12 h × 3.00.
    assert_eq!(line(&oct, "a", StatementLine::ComputeQuota), "36.00");
    // The job completed in November; its units carry its whole compute.
    let b = &nov.tenants[0].breakdown;
    assert_eq!(b.completed_jobs, 1);
    assert_eq!(b.completed_work_units["epochs"].to_string(), "10");
    assert_eq!(
        b.cost_per_work_unit["epochs"].as_ref().unwrap().to_string(),
        "109.200000000000"
    );
    assert_eq!(oct.tenants[0].breakdown.completed_jobs, 0);
    assert_eq!(oct.tenants[0].breakdown.cost_per_completed_job, None);
}

#[test]
fn proportional_idle_is_shared_by_held_ge_hours() {
    let mut facts = base("window", "proportional");
    facts.segment(segment(
        "a",
        "ja",
        1,
        UseKind::Quota,
        (1, 1),
        &["G1"],
        "2026-11-01T00:00:00Z",
        None,
        None,
    ));
    facts.segment(segment(
        "b",
        "jb",
        1,
        UseKind::Quota,
        (1, 1),
        &["G2"],
        "2026-11-01T00:00:00Z",
        Some("2026-11-01T05:00:00Z"),
        Some(JobState::Cancelled),
    ));
    // 10 h into the month: 4 GE × 10 h − 10 − 5 = 25 GE-h free × 3.00 = 75,
    // shared 10 : 5.
    let s = november(&facts, "2026-11-01T10:00:00Z");
    assert_eq!(s.platform.unallocated.to_string(), "75.00");
    assert_eq!(line(&s, "a", StatementLine::SharedIdle), "50.00");
    assert_eq!(line(&s, "b", StatementLine::SharedIdle), "25.00");
    // A running allocation counts up to `now`; a cancelled one is failed work.
    assert_eq!(line(&s, "a", StatementLine::ComputeQuota), "30.00");
    let b = s.tenants.iter().find(|t| t.tenant == "b").unwrap();
    assert_eq!(b.breakdown.failed_work.to_string(), "15.00");
}

#[test]
fn storage_egress_overhead_and_half_even_rounding() {
    let mut facts = Facts::new();
    facts
        .observe(&book(
            1,
            "2026-10-01T00:00:00Z",
            "3.00",
            "window",
            "central",
            "10",
        ))
        .unwrap();
    for (id, kind, quantity) in [
        ("u1", "storage_gb_hours", "730"),
        ("u2", "egress_bytes", "2500000000"),
        ("u3", "ingress_bytes", "9000000000"),
    ] {
        facts
            .observe(&event(&format!(
                r#"{{"type":"UsageRecord","event_id":"{id}","event_time":"2026-11-03T00:00:00Z","source":"t","cluster":"c","pool":"p","tenant":"a","kind":"{kind}","quantity":"{quantity}","start":"2026-11-02T00:00:00Z","end":"2026-11-03T00:00:00Z"}}"#
            )))
            .unwrap();
    }
    let s = november(&facts, "2026-11-04T00:00:00Z");
    // 1 GB-month × 0.10; 2.5 GB × 0.05 = 0.125 → 0.12 (half to even).
    assert_eq!(line(&s, "a", StatementLine::Storage), "0.10");
    assert_eq!(line(&s, "a", StatementLine::DataMovement), "0.12");
    // 10 % of the exact 0.225 = 0.0225 → 0.02; total = Σ rounded lines.
    assert_eq!(line(&s, "a", StatementLine::Overhead), "0.02");
    assert_eq!(line(&s, "a", StatementLine::Total), "0.24");
}

#[test]
fn unadmitted_use_is_burst_and_retries_are_counted() {
    let mut facts = base("window", "central");
    facts.segment(segment(
        "a",
        "j1",
        1,
        UseKind::Quota,
        (1, 1),
        &["G1"],
        "2026-11-01T00:00:00Z",
        Some("2026-11-01T01:00:00Z"),
        Some(JobState::Failed),
    ));
    facts.segment(segment(
        "a",
        "j1",
        2,
        UseKind::Unadmitted,
        (1, 7),
        &[],
        "2026-11-01T01:00:00Z",
        Some("2026-11-01T08:00:00Z"),
        Some(JobState::Completed),
    ));
    let s = november(&facts, "2026-11-02T00:00:00Z");
    assert_eq!(line(&s, "a", StatementLine::ComputeQuota), "3.00");
    // 1/7 GE × 7 h × 5.00.
    assert_eq!(line(&s, "a", StatementLine::ComputeBurst), "5.00");
    let b = &s.tenants[0].breakdown;
    assert_eq!(b.failed_work.to_string(), "3.00");
    assert_eq!(b.retried_work.to_string(), "3.00");
    assert_eq!(b.completed_jobs, 1);
    assert_eq!(
        b.cost_per_completed_job.as_ref().unwrap().to_string(),
        "8.00"
    );
}

#[test]
fn a_period_no_book_prices_is_an_error_naming_the_instant() {
    let mut facts = Facts::new();
    facts
        .observe(&book(
            1,
            "2026-11-10T00:00:00Z",
            "3.00",
            "window",
            "central",
            "0",
        ))
        .unwrap();
    facts.segment(segment(
        "a",
        "j1",
        1,
        UseKind::Quota,
        (1, 1),
        &[],
        "2026-11-01T00:00:00Z",
        Some("2026-11-02T00:00:00Z"),
        Some(JobState::Completed),
    ));
    let e = statement(
        &facts,
        "2026-11".parse().unwrap(),
        ts("2026-12-01T00:00:00Z"),
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("2026-11-01T00:00:00Z"), "{e}");
}

#[test]
fn every_known_tenant_is_listed_and_the_platform_adds_up() {
    let mut facts = base("window", "central");
    facts
        .observe(&event(
            r#"{"type":"TenantPolicy","event_id":"p1","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","pool":"p","tenant":"idle-team","nominal_ge":"1","burst_ge":"0","enforcement":"deny"}"#,
        ))
        .unwrap();
    reservation(&mut facts);
    let s = november(&facts, "2026-11-02T00:00:00Z");
    let names: Vec<&str> = s.tenants.iter().map(|t| t.tenant.as_str()).collect();
    assert_eq!(names, ["a", "idle-team"]);
    assert_eq!(line(&s, "idle-team", StatementLine::Total), "0.00");
    assert_eq!(s.platform.total.to_string(), "16.00");
}

#[test]
fn month_to_date_spend_is_rounded_lines_plus_overhead() {
    let mut facts = Facts::new();
    facts
        .observe(&book(
            1,
            "2026-10-01T00:00:00Z",
            "3.00",
            "window",
            "central",
            "10",
        ))
        .unwrap();
    facts.segment(segment(
        "a",
        "j1",
        1,
        UseKind::Quota,
        (1, 7),
        &[],
        "2026-11-01T00:00:00Z",
        None,
        None,
    ));
    // 1/7 GE × 10 h × 3.00 = 4.2857… → 4.29, plus 10 %.
    let (spend, hours) = month_to_date(&facts, "p", "a", ts("2026-11-01T10:00:00Z")).unwrap();
    assert_eq!(spend.round_half_even(4).to_string(), "4.7190");
    assert_eq!(hours.to_string(), "10/7");
}

/// `base("usage", "central")` with a second book from 1 November that
/// prices energy at `per_kwh`.
fn with_energy_price(per_kwh: &str) -> Facts {
    let mut facts = base("usage", "central");
    let book = r#"{"type":"PriceBook","event_id":"book-2","event_time":"2026-11-01T00:00:00Z","source":"t","cluster":"c","version":2,"effective_from":"2026-11-01T00:00:00Z","currency":"USD","rates":[{"model":"M","reserved_per_gpu_hour":"2.00","quota_per_gpu_hour":"3.00","on_demand_per_gpu_hour":"5.00"}],"storage_per_gb_month":"0.10","egress_per_gb":"0.05","energy_per_kwh":"PRICE","overhead_pct":"0","reservation_charge":"usage","idle_distribution":"central"}"#.replace("PRICE", per_kwh);
    facts.observe(&event(&book)).unwrap();
    facts
}

#[test]
fn energy_and_idle_time_come_from_telemetry() {
    let mut facts = with_energy_price("0.30");
    // Tenant a holds G1 (a whole GPU) from 00:00 to 02:00: 2 h × 3.00.
    facts.segment(segment(
        "a",
        "j1",
        1,
        UseKind::Quota,
        (1, 1),
        &["G1"],
        "2026-11-02T00:00:00Z",
        Some("2026-11-02T02:00:00Z"),
        Some(JobState::Completed),
    ));
    facts.sampled("p", ts("2026-11-02T00:00:00Z"), ts("2026-11-02T03:00:00Z"));
    let energy = |at: &str, delta_mj: i64, slices: i64| EnergyUse {
        device_uuid: "G1".into(),
        at: ts(at),
        delta_mj,
        slices,
        max_slices: 7,
    };
    // 1 kWh while a held G1: 0.30. Two kWh of which 3/7 is the sampled
    // device's: 6/7 kWh × 0.30 = 0.2571…. After 02:00 nobody holds G1:
    // the platform's.
    facts.energy("p", energy("2026-11-02T01:00:00Z", 3_600_000_000, 7));
    facts.energy("p", energy("2026-11-02T01:30:00Z", 7_200_000_000, 3));
    facts.energy("p", energy("2026-11-02T03:00:00Z", 3_600_000_000, 7));
    let idle = |device: &str, from: &str, to: &str| IdleStretch {
        device_uuid: device.into(),
        from: ts(from),
        to: ts(to),
        slices: 7,
        max_slices: 7,
    };
    // Idle 01:00–01:30 (1.50) and 01:50–02:10, of which 10 min held (0.50);
    // G2 idle while nobody held it counts for nobody.
    facts.idle(
        "p",
        idle("G1", "2026-11-02T01:00:00Z", "2026-11-02T01:30:00Z"),
    );
    facts.idle(
        "p",
        idle("G1", "2026-11-02T01:50:00Z", "2026-11-02T02:10:00Z"),
    );
    facts.idle(
        "p",
        idle("G2", "2026-11-02T01:00:00Z", "2026-11-02T02:00:00Z"),
    );
    let s = november(&facts, "2026-12-01T00:00:00Z");
    assert_eq!(line(&s, "a", StatementLine::ComputeQuota), "6.00");
    assert_eq!(line(&s, "a", StatementLine::Energy), "0.56");
    assert_eq!(line(&s, "a", StatementLine::Total), "6.56");
    let a = s.tenants.iter().find(|t| t.tenant == "a").unwrap();
    assert_eq!(
        a.breakdown.idle_allocated.as_ref().unwrap().to_string(),
        "2.00"
    );
    let energy_charge = a
        .charges
        .iter()
        .find(|c| c.line == StatementLine::Energy)
        .unwrap();
    assert_eq!(energy_charge.unit(), Some("kWh"));
    // 1 + 6/7 kWh.
    assert_eq!(energy_charge.quantity, Rational::new(13, 7));

    // Without telemetry there is no idle figure at all, not a zero.
    let mut quiet = base("usage", "central");
    quiet.segment(segment(
        "a",
        "j1",
        1,
        UseKind::Quota,
        (1, 1),
        &["G1"],
        "2026-11-02T00:00:00Z",
        Some("2026-11-02T02:00:00Z"),
        None,
    ));
    let s = november(&quiet, "2026-12-01T00:00:00Z");
    assert!(s.tenants[0].breakdown.idle_allocated.is_none());
}

#[test]
fn device_hours_price_exactly_as_the_samples_they_sum() {
    let mut facts = with_energy_price("0.37");
    // `a` holds a 3/7 instance from 01:00 to 03:00 exactly.
    facts.segment(segment(
        "a",
        "j1",
        1,
        UseKind::Quota,
        (3, 7),
        &["M1"],
        "2026-11-02T01:00:00Z",
        Some("2026-11-02T03:00:00Z"),
        Some(JobState::Completed),
    ));
    facts.sampled("p", ts("2026-11-02T00:00:00Z"), ts("2026-11-02T04:00:00Z"));
    let now = ts("2026-12-01T00:00:00Z");
    let mut by_sample = facts.clone();
    let mut by_hour = facts.clone();
    // Samples every 10 s from 00:00:10 to 04:00:00, one in three idle,
    // with an odd energy delta each.
    let start = ts("2026-11-02T00:00:00Z").as_micros();
    let mut hours: BTreeMap<i64, DeviceHour> = BTreeMap::new();
    for n in 1..=(4 * 360) {
        let t = start + n * 10_000_000;
        let delta_mj = 1_000_003 + n * 17;
        let idle = n % 3 == 0;
        by_sample.energy(
            "p",
            EnergyUse {
                device_uuid: "M1".into(),
                at: Timestamp::from_micros(t),
                delta_mj,
                slices: 3,
                max_slices: 7,
            },
        );
        if idle {
            by_sample.idle(
                "p",
                IdleStretch {
                    device_uuid: "M1".into(),
                    from: Timestamp::from_micros(t - 10_000_000),
                    to: Timestamp::from_micros(t),
                    slices: 3,
                    max_slices: 7,
                },
            );
        }
        let hour = (t - 1).div_euclid(3_600_000_000) * 3_600_000_000;
        let h = hours.entry(hour).or_insert_with(|| DeviceHour {
            device_uuid: "M1".into(),
            from: Timestamp::from_micros(t - 10_000_000),
            to: Timestamp::from_micros(t),
            first_sample: Timestamp::from_micros(t),
            last_sample: Timestamp::from_micros(t),
            idle_micros: 0,
            energy_mj: 0,
            slices: 3,
            max_slices: 7,
        });
        h.to = Timestamp::from_micros(t);
        h.last_sample = h.to;
        h.energy_mj += delta_mj;
        h.idle_micros += if idle { 10_000_000 } else { 0 };
    }
    // Every hour is whole: before, inside and after the segment.
    let holders = facts.holders("p");
    for h in hours.values() {
        assert!(holders.settles_whole("M1", h.from, h.to, now), "{h:?}");
    }
    // An hour the segment starts or ends inside is not.
    assert!(!holders.settles_whole(
        "M1",
        ts("2026-11-02T00:30:00Z"),
        ts("2026-11-02T01:30:00Z"),
        now
    ));
    assert!(!holders.settles_whole(
        "M1",
        ts("2026-11-02T02:30:00Z"),
        ts("2026-11-02T03:30:00Z"),
        now
    ));
    // Nor one that crosses a month's end or the ledger's time.
    assert!(!holders.settles_whole(
        "M1",
        ts("2026-11-30T23:30:00Z"),
        ts("2026-12-01T00:30:00Z"),
        ts("2027-01-01T00:00:00Z")
    ));
    assert!(!holders.settles_whole(
        "M1",
        ts("2026-11-02T01:30:00Z"),
        ts("2026-11-02T02:30:00Z"),
        ts("2026-11-02T02:00:00Z")
    ));
    for h in hours.into_values() {
        by_hour.device_hour("p", h);
    }
    let (a, b) = (
        november(&by_sample, "2026-12-01T00:00:00Z"),
        november(&by_hour, "2026-12-01T00:00:00Z"),
    );
    assert_eq!(a.to_json(), b.to_json());
    assert_eq!(a.tenants[0].charges, b.tenants[0].charges);
    assert_ne!(line(&a, "a", StatementLine::Energy), "0.00");
    assert_ne!(
        a.tenants[0]
            .breakdown
            .idle_allocated
            .as_ref()
            .unwrap()
            .to_string(),
        "0.00"
    );
}

mod running_totals;
