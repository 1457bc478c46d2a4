//! What the running totals of settled segments are checked against: a
//! copy of the facts, which keeps no totals and prices every row afresh.

use super::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    /// Opens a segment for tenant `t` on device `d` at hour `h`.
    Open { t: usize, d: usize, h: i64 },
    /// Closes the `n`th segment opened (modulo how many), `len` hours after its start
    /// (again if it was closed: the closed row is replaced).
    Close { n: usize, len: i64 },
    /// Device `d` fails or recovers at hour `h` (a new generation).
    Health { d: usize, h: i64, failed: bool },
    /// Prices tenant `t`'s month to date at hour `h`.
    Ask { t: usize, h: i64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..2usize, 0..4usize, 0..600i64).prop_map(|(t, d, h)| Step::Open { t, d, h }),
        3 => (0..64usize, 0..200i64).prop_map(|(n, len)| Step::Close { n, len }),
        1 => (0..4usize, 0..1000i64, any::<bool>())
            .prop_map(|(d, h, failed)| Step::Health { d, h, failed }),
        3 => (0..2usize, 0..900i64).prop_map(|(t, h)| Step::Ask { t, h }),
    ]
}

fn hour(h: i64) -> Timestamp {
    // October 31, 20:00 on: some segments start before the month.
    Timestamp::from_micros(ts("2026-10-31T20:00:00Z").as_micros() + h * 3_600_000_000)
}

proptest! {
    #[test]
    fn budgets_priced_from_running_totals_equal_pricing_afresh(
        steps in proptest::collection::vec(step(), 1..60)
    ) {
        let mut facts = base("window", "central");
        let mut opened: Vec<Segment> = Vec::new();
        for (i, step) in steps.into_iter().enumerate() {
            match step {
                Step::Open { t, d, h } => {
                    let mut s = segment(
                        ["a", "b"][t], &format!("j{i}"), 1, UseKind::Quota, (1, 1),
                        &[["G1", "G2", "G3", "G4"][d]], "2026-11-01T00:00:00Z", None, None,
                    );
                    s.start = hour(h);
                    facts.segment(s.clone());
                    opened.push(s);
                }
                Step::Close { n, len } => {
                    if let Some(open) = opened.get(n % opened.len().max(1)) {
                        let mut closed = open.clone();
                        closed.end = Some(open.start.plus_micros((len + 1) * 3_600_000_000));
                        closed.final_state = Some(JobState::Completed);
                        facts.segment(closed);
                    }
                }
                Step::Health { d, h, failed } => {
                    let state = if failed { "failed" } else { "healthy" };
                    facts.observe(&event(&format!(
                        r#"{{"type":"DeviceHealth","event_id":"h{i}","event_time":"{}","source":"t","cluster":"c","pool":"p","node":"n1","device_uuid":"G{}","state":"{state}","reason":"x"}}"#,
                        hour(h), d + 1
                    ))).unwrap();
                }
                Step::Ask { t, h } => {
                    let tenant = ["a", "b"][t];
                    let kept = month_to_date(&facts, "p", tenant, hour(h)).unwrap();
                    let afresh = month_to_date(&facts.clone(), "p", tenant, hour(h)).unwrap();
                    prop_assert_eq!(kept, afresh);
                }
            }
        }
    }
}
