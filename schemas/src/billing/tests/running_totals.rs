//! What the running totals of settled segments, and running segments
//! priced by class, are checked against: a copy of the facts, which keeps
//! no totals, pricing every row afresh and one by one.

use super::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    /// Opens a segment for tenant `t` on device `d` at hour `h`, of kind
    /// `k` holding `slices` sevenths (few sizes: segments often share a
    /// class).
    Open {
        t: usize,
        d: usize,
        h: i64,
        k: usize,
        slices: i64,
    },
    /// Closes the `n`th segment opened (modulo how many), `len` hours after its start
    /// (again if it was closed: the closed row is replaced).
    Close { n: usize, len: i64 },
    /// Device `d` fails or recovers at hour `h` (a new generation).
    Health { d: usize, h: i64, failed: bool },
    /// A price book with a quota rate of `cents` takes effect at hour `h`.
    Book { h: i64, cents: i64 },
    /// Prices tenant `t`'s month to date at hour `h`.
    Ask { t: usize, h: i64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..2usize, 0..4usize, 0..600i64, 0..4usize, 1..=2i64)
            .prop_map(|(t, d, h, k, slices)| Step::Open { t, d, h, k, slices }),
        3 => (0..64usize, 0..200i64).prop_map(|(n, len)| Step::Close { n, len }),
        1 => (0..4usize, 0..1000i64, any::<bool>())
            .prop_map(|(d, h, failed)| Step::Health { d, h, failed }),
        1 => (0..900i64, 100..900i64).prop_map(|(h, cents)| Step::Book { h, cents }),
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
                Step::Open { t, d, h, k, slices } => {
                    // Mostly quota: the rate each new book changes.
                    let kind = [UseKind::Quota, UseKind::Quota, UseKind::Burst, UseKind::Reserved][k];
                    let mut s = segment(
                        ["a", "b"][t], &format!("j{i}"), 1, kind, (slices, 7),
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
                Step::Book { h, cents } => {
                    let quota = format!("{}.{:02}", cents / 100, cents % 100);
                    let version = i64::try_from(i).unwrap() + 2;
                    facts.observe(&book(version, &hour(h).to_string(), &quota, "window", "central", "0"))
                        .unwrap();
                }
                Step::Ask { t, h } => {
                    let tenant = ["a", "b"][t];
                    let kept = month_to_date(&facts, "p", tenant, hour(h)).unwrap();
                    crate::billing::by_class::ONE_BY_ONE.set(true);
                    let afresh = month_to_date(&facts.clone(), "p", tenant, hour(h));
                    crate::billing::by_class::ONE_BY_ONE.set(false);
                    prop_assert_eq!(kept, afresh.unwrap());
                }
            }
        }
    }
}
