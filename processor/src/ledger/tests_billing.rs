//! Billing in the state machine: the worked example's statement from the
//! segments the ledger settles, and budgets.

use gpuledger_schemas::{Event, EventBody, Timestamp};

use super::tests::{decisions, run, run_accepted};
use super::*;

/// Everything a statement needs, from applying `lines` in order.
fn facts_of(lines: &[String]) -> (gpuledger_schemas::billing::Facts, Timestamp) {
    let events: Vec<Event> = lines
        .iter()
        .map(|l| Event::from_json_str(l).unwrap())
        .collect();
    let folded = crate::offline::fold(&events, LedgerConfig::default()).unwrap();
    (folded.facts, folded.now.unwrap())
}

#[test]
fn the_worked_example_gives_the_published_statement() {
    let dir = super::tests::shared_examples();
    let lines: Vec<String> = std::fs::read_to_string(format!("{dir}/mig-quota-basics.ndjson"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{dir}/mig-quota-basics.statement.json")).unwrap(),
    )
    .unwrap();
    let (facts, now) = facts_of(&lines);
    let statement =
        gpuledger_schemas::billing::statement(&facts, "2026-11".parse().unwrap(), now).unwrap();
    assert_eq!(
        serde_json::to_string_pretty(&statement.to_json()).unwrap(),
        serde_json::to_string_pretty(&expected).unwrap()
    );
}

fn priced(quota: &str) -> String {
    format!(
        r#"{{"type":"PriceBook",{},"version":1,"effective_from":"2026-10-01T00:00:00Z","currency":"USD","rates":[{{"model":"NVIDIA H200","reserved_per_gpu_hour":"{quota}","quota_per_gpu_hour":"{quota}","on_demand_per_gpu_hour":"{quota}"}}],"storage_per_gb_month":"0","egress_per_gb":"0","overhead_pct":"0","reservation_charge":"window","idle_distribution":"central"}}"#,
        tests_support::env("book-1", "2026-10-01T00:00:00Z")
    )
}

fn budget_policy(budget: &str, hours: Option<&str>) -> String {
    let hours = hours.map_or(String::new(), |h| format!(r#","monthly_gpu_hours":"{h}""#));
    format!(
        r#"{{"type":"TenantPolicy",{},"pool":"p","tenant":"team-a","nominal_ge":"1","burst_ge":"0","monthly_budget":"{budget}"{hours},"enforcement":"alert"}}"#,
        tests_support::env(&format!("pol-budget-{budget}"), "2026-11-01T00:00:00Z")
    )
}

fn alerts(outcomes: &[Outcome]) -> Vec<(String, i32, String)> {
    decisions(outcomes)
        .into_iter()
        .filter_map(|d| match d.body {
            EventBody::BudgetAlert(a) => Some((
                a.budget_kind.to_string(),
                a.threshold_pct,
                a.spend.to_string(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn budgets_alert_once_per_threshold_and_deny_once_spent() {
    use tests_support::*;
    // 1 GPU at 10.00 an hour against a budget of 100.00.
    let lines = vec![
        priced("10.00"),
        inventory("p", 2, "2026-11-01T00:00:00Z"),
        budget_policy("100", None),
        admit("r1", "team-a", "j1", 1, 1, "2026-11-01T00:00:00Z"),
        job("j1", "team-a", "started", "2026-11-01T00:00:00Z"),
        clock("2026-11-01T04:00:00Z"),
        clock("2026-11-01T05:00:00Z"),
        clock("2026-11-01T06:00:00Z"),
        clock("2026-11-01T08:30:00Z"),
        job("j1", "team-a", "completed", "2026-11-01T10:00:00Z"),
        clock("2026-11-01T11:00:00Z"),
        admit("r2", "team-a", "j2", 1, 7, "2026-11-01T12:00:00Z"),
        // A new month: spend starts again from zero.
        clock("2026-12-01T00:00:00Z"),
        admit("r3", "team-a", "j3", 1, 7, "2026-12-01T00:00:00Z"),
    ];
    let mut ledger = Ledger::new(LedgerConfig::default());
    let outcomes = run_accepted(&mut ledger, &lines);
    assert_eq!(
        alerts(&outcomes),
        vec![
            ("money".to_owned(), 50, "50.00".to_owned()),
            ("money".to_owned(), 80, "85.00".to_owned()),
            ("money".to_owned(), 100, "100.00".to_owned()),
        ]
    );
    // Which event raised each alert: 50 % at 05:00, 80 % at 08:30, 100 % at 10:00.
    let causes: Vec<usize> = outcomes
        .iter()
        .enumerate()
        .filter(|(_, o)| !alerts(std::slice::from_ref(o)).is_empty())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(causes, [6, 8, 9]);
    let admissions: Vec<(String, String)> = decisions(&outcomes)
        .into_iter()
        .filter_map(|d| match d.body {
            EventBody::AdmissionDecision(a) => Some((a.request_id.into(), a.reason.into())),
            _ => None,
        })
        .collect();
    assert_eq!(admissions[0], ("r1".into(), "within_quota".into()));
    assert_eq!(admissions[1].0, "r2");
    assert!(
        admissions[1]
            .1
            .starts_with("budget_exhausted: money month-to-date 100.00 of 100 in 2026-11"),
        "{:?}",
        admissions[1]
    );
    assert_eq!(admissions[2], ("r3".into(), "within_quota".into()));
}

#[test]
fn a_gpu_hour_budget_denies_too() {
    use tests_support::*;
    let lines = vec![
        priced("1.00"),
        inventory("p", 2, "2026-11-01T00:00:00Z"),
        budget_policy("1000000", Some("3")),
        admit("r1", "team-a", "j1", 1, 1, "2026-11-01T00:00:00Z"),
        job("j1", "team-a", "started", "2026-11-01T00:00:00Z"),
        job("j1", "team-a", "completed", "2026-11-01T03:00:00Z"),
        admit("r2", "team-a", "j2", 1, 1, "2026-11-01T04:00:00Z"),
    ];
    let mut ledger = Ledger::new(LedgerConfig::default());
    let outcomes = run(&mut ledger, &lines);
    let reasons: Vec<String> = decisions(&outcomes)
        .into_iter()
        .filter_map(|d| match d.body {
            EventBody::AdmissionDecision(a) => Some(a.reason.into()),
            _ => None,
        })
        .collect();
    assert!(
        reasons[1].starts_with("budget_exhausted: gpu_hours"),
        "{reasons:?}"
    );
    assert_eq!(
        alerts(&outcomes),
        vec![
            // No event between the start and the end: all three at once.
            ("gpu_hours".to_owned(), 50, "3.00".to_owned()),
            ("gpu_hours".to_owned(), 80, "3.00".to_owned()),
            ("gpu_hours".to_owned(), 100, "3.00".to_owned()),
        ]
    );
}

#[test]
fn a_node_that_joins_late_holds_its_devices_only_from_its_start() {
    use tests_support::*;
    // j1 runs on GPU 0 from 00:00; GPU 1 fails at 01:00; at 11:00 another
    // node of j1 starts on GPU 1. The hours before belong to GPU 0 alone,
    // so they earn no credit and the spent budget stays spent.
    let on_gpu = |line: String, gpu: usize| {
        line.replacen(
            r#""requested_slices""#,
            &format!(r#""devices":["GPU-p-{gpu}"],"requested_slices""#),
            1,
        )
    };
    let lines = vec![
        priced("10.00"),
        inventory("p", 2, "2026-11-01T00:00:00Z"),
        budget_policy("100", None),
        admit("r1", "team-a", "j1", 1, 1, "2026-11-01T00:00:00Z"),
        on_gpu(job("j1", "team-a", "started", "2026-11-01T00:00:00Z"), 0),
        health("failed", 1, "2026-11-01T01:00:00Z"),
        // 105.00 spent: the budget is spent, and stays so while nothing
        // credits it (the watch that answers the next admission).
        clock("2026-11-01T10:30:00Z"),
        on_gpu(job("j1", "team-a", "started", "2026-11-01T11:00:00Z"), 1),
        admit("r2", "team-a", "j2", 1, 7, "2026-11-01T11:00:00Z"),
    ];
    let mut ledger = Ledger::new(LedgerConfig::default());
    let outcomes = run_accepted(&mut ledger, &lines);
    let Outcome::Applied { segments, .. } = &outcomes[7] else {
        panic!("the second start was not applied");
    };
    let cut: Vec<(Option<String>, Vec<String>)> = segments
        .iter()
        .map(|s| {
            let devices = s.devices.iter().map(|d| d.to_string()).collect();
            (s.end.map(|e| e.to_string()), devices)
        })
        .collect();
    assert_eq!(
        cut,
        vec![
            (
                Some("2026-11-01T11:00:00Z".to_owned()),
                vec!["GPU-p-0".to_owned()]
            ),
            (None, vec!["GPU-p-0".to_owned(), "GPU-p-1".to_owned()]),
        ]
    );
    let reason = decisions(&outcomes)
        .into_iter()
        .find_map(|d| match d.body {
            EventBody::AdmissionDecision(a) if a.request_id == "r2" => Some(a.reason),
            _ => None,
        })
        .unwrap();
    assert!(
        reason.starts_with("budget_exhausted: money month-to-date 105.00 of 100"),
        "{reason}"
    );
}

#[test]
fn a_budget_set_while_every_budget_is_watched_is_priced_at_once() {
    use tests_support::*;
    // team-b's budget is far off, so its watch holds for days and no
    // tenant is looked at event by event; then team-a, already 60.00 into
    // the month, gets a budget of 100.00.
    let team_b = format!(
        r#"{{"type":"TenantPolicy",{},"pool":"p","tenant":"team-b","nominal_ge":"1","burst_ge":"0","monthly_budget":"100000","enforcement":"alert"}}"#,
        env("pol-team-b", "2026-11-01T00:00:00Z")
    );
    let lines = vec![
        priced("10.00"),
        inventory("p", 2, "2026-11-01T00:00:00Z"),
        team_b,
        policy("team-a", "1", "0", "2026-11-01T00:00:00Z"),
        admit("r1", "team-a", "j1", 1, 1, "2026-11-01T00:00:00Z"),
        job("j1", "team-a", "started", "2026-11-01T00:00:00Z"),
        clock("2026-11-01T06:00:00Z"),
        budget_policy("100", None),
        clock("2026-11-01T06:10:00Z"),
    ];
    let mut ledger = Ledger::new(LedgerConfig::default());
    let outcomes = run_accepted(&mut ledger, &lines);
    assert!(alerts(&outcomes[..7]).is_empty());
    // Alerted by the policy itself, not by a later event.
    assert_eq!(
        alerts(std::slice::from_ref(&outcomes[7])),
        vec![("money".to_owned(), 50, "60.00".to_owned())]
    );
}

#[test]
fn a_watch_bounds_spend_by_the_rate_of_its_own_kind_and_model() {
    use tests_support::*;
    // The book prices another model far dearer, and on-demand use four
    // times quota use; team-a runs 1 GE at the quota rate, 2.00 an hour,
    // so its spend reaches the 50 % line of 100.00 after 25 hours. The
    // watch priced at 00:10 holds until then: bounded by the dearest rate
    // of the book it would have run out within minutes, and been priced
    // again and again on the way.
    let book = format!(
        r#"{{"type":"PriceBook",{},"version":1,"effective_from":"2026-10-01T00:00:00Z","currency":"USD","rates":[{{"model":"NVIDIA B200","reserved_per_gpu_hour":"100","quota_per_gpu_hour":"100","on_demand_per_gpu_hour":"100"}},{{"model":"NVIDIA H200","reserved_per_gpu_hour":"1","quota_per_gpu_hour":"2","on_demand_per_gpu_hour":"8"}}],"storage_per_gb_month":"0","egress_per_gb":"0","overhead_pct":"0","reservation_charge":"window","idle_distribution":"central"}}"#,
        env("book-1", "2026-10-01T00:00:00Z")
    );
    let lines = vec![
        book,
        inventory("p", 2, "2026-11-01T00:00:00Z"),
        budget_policy("100", None),
        admit("r1", "team-a", "j1", 1, 1, "2026-11-01T00:00:00Z"),
        job("j1", "team-a", "started", "2026-11-01T00:00:00Z"),
        clock("2026-11-01T00:10:00Z"),
    ];
    let mut ledger = Ledger::new(LedgerConfig::default());
    run_accepted(&mut ledger, &lines);
    let line_reached = Timestamp::from_secs(1_793_491_200 + 25 * 3600);
    assert_eq!(line_reached.to_string(), "2026-11-02T01:00:00Z");
    let until = ledger
        .state
        .budget_watch
        .get("p", "team-a")
        .unwrap()
        .until();
    // Rates round up and the room down by a margin of ten cents: three
    // minutes early at most.
    assert!(
        until <= line_reached && until >= line_reached.plus_micros(-180_000_000),
        "the watch holds until {until}"
    );

    // The line is still alerted when reached, and only then.
    let more = vec![clock("2026-11-02T00:50:00Z"), clock("2026-11-02T01:00:10Z")];
    let outcomes = run_accepted(&mut ledger, &more);
    assert!(alerts(&outcomes[..1]).is_empty());
    assert_eq!(
        alerts(&outcomes[1..]),
        vec![("money".to_owned(), 50, "50.01".to_owned())]
    );
}
