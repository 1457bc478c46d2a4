//! Tests of `reservations`.

use gpuledger_schemas::{Event, EventBody};

use super::super::tests_support::*;
use super::super::{Ledger, LedgerConfig, Outcome, Position};
use super::*;

/// The booked sum at `at`, reservation by reservation.
fn booked_at(reservations: &[Reservation], at: Timestamp) -> Ge {
    reservations
        .iter()
        .filter(|r| r.active_at(at))
        .map(|r| r.ge.clone())
        .sum()
}

fn reservation(start: i64, end: i64, slices: i32, confirmed: bool) -> Reservation {
    Reservation {
        tenant: "t".into(),
        slices,
        max_slices: 7,
        ge: Ge::of(slices, 7),
        start: Timestamp::from_secs(start),
        end: Timestamp::from_secs(end),
        confirmed,
        cancelled_at: None,
        opened: false,
        closed: !confirmed,
    }
}

#[test]
fn booked_steps_agree_with_a_sum_at_every_instant() {
    // A fixed pseudo-random set: overlapping, nested, touching,
    // unconfirmed and cancelled windows.
    let mut seed = 7_u64;
    let mut next = |n: u64| {
        seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (seed >> 33) % n
    };
    let mut all = Vec::new();
    for _ in 0..300 {
        let start = next(1_000) as i64;
        let mut r = reservation(
            start,
            start + 1 + next(200) as i64,
            1 + next(7) as i32,
            next(5) > 0,
        );
        if next(10) == 0 {
            r.cancelled_at = Some(Timestamp::from_secs(start + next(50) as i64));
        }
        all.push(r);
    }
    let (from, to) = (Timestamp::from_secs(100), Timestamp::from_secs(900));
    let steps = booked_steps(all.iter(), from, to);
    assert_eq!(steps[0].0, from);
    for (i, (at, booked)) in steps.iter().enumerate() {
        let until = steps.get(i + 1).map_or(to, |s| s.0);
        assert!(*at < until, "steps are in order");
        // Every second of the step books the same.
        for second in at.as_micros() / 1_000_000..until.as_micros() / 1_000_000 {
            assert_eq!(
                booked_at(&all, Timestamp::from_secs(second)),
                *booked,
                "at {second}"
            );
        }
    }
}

/// The reservation decisions `lines` give under `config`: (id, outcome,
/// reason).
fn decisions(config: LedgerConfig, lines: &[String]) -> Vec<(String, String, String)> {
    let mut ledger = Ledger::new(config);
    let mut out = Vec::new();
    for (offset, line) in lines.iter().enumerate() {
        let event = Event::from_json_str(line).unwrap();
        let position = Position {
            partition: 0,
            offset: offset as i64,
        };
        if let Outcome::Applied { decisions, .. } = ledger.apply(position, &event) {
            for d in decisions {
                if let EventBody::ReservationDecision(d) = &d.body {
                    out.push((
                        d.reservation_id.clone(),
                        d.decision.as_str().to_owned(),
                        d.reason.to_string(),
                    ));
                }
            }
        }
    }
    out
}

#[test]
fn windows_too_long_too_far_ahead_or_too_many_are_rejected() {
    let config = LedgerConfig {
        reservations: ReservationLimits {
            max_open_per_tenant: 2,
            ..ReservationLimits::default()
        },
        ..LedgerConfig::default()
    };
    let mut lines = base();
    lines.push(reserve(
        "long",
        "team-a",
        1,
        "2026-11-03T00:00:00Z",
        "2027-02-02T00:00:00Z",
        T0,
    ));
    lines.push(reserve(
        "far",
        "team-a",
        1,
        "2027-11-03T00:00:00Z",
        "2027-11-04T00:00:00Z",
        T0,
    ));
    for id in ["one", "two", "three"] {
        lines.push(reserve(
            id,
            "team-a",
            1,
            "2026-11-03T00:00:00Z",
            "2026-11-04T00:00:00Z",
            T0,
        ));
    }
    // Another tenant has its own count (spare is 2 GE, all booked on
    // the 3rd).
    lines.push(reserve(
        "b-one",
        "team-b",
        1,
        "2026-11-05T00:00:00Z",
        "2026-11-06T00:00:00Z",
        T0,
    ));
    let got = decisions(config, &lines);
    let outcome = |id: &str| {
        got.iter()
            .find(|d| d.0 == id)
            .unwrap_or_else(|| panic!("{id}: {got:?}"))
    };
    assert_eq!(outcome("long").1, "rejected");
    assert!(
        outcome("long")
            .2
            .starts_with("too_long: the window is 91 days long; at most 90"),
        "{got:?}"
    );
    assert_eq!(outcome("far").1, "rejected");
    assert!(outcome("far").2.starts_with("too_far_ahead:"), "{got:?}");
    assert_eq!(outcome("one").1, "confirmed");
    assert_eq!(outcome("two").1, "confirmed");
    assert_eq!(outcome("three").1, "rejected");
    assert!(
        outcome("three")
            .2
            .starts_with("too_many_open: team-a holds 2"),
        "{got:?}"
    );
    assert_eq!(outcome("b-one").1, "confirmed");
}
