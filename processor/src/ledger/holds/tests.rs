//! Tests of `holds`.

use super::*;

fn hold(expires_at: i64) -> Hold {
    Hold {
        request_id: format!("r-{expires_at}").into(),
        tenant: "t".into(),
        ge: Ge::of(1, 7),
        kind: HoldKind::Quota,
        admitted_seq: 1,
        expires_at: Some(Timestamp::from_micros(expires_at)),
        after_end: false,
    }
}

#[test]
fn an_attempt_keeps_its_hold_and_its_attempt_in_one_record() {
    let mut live = Live::default();
    live.insert_new(("j", 1), hold(10));
    let found = live.find(("j", 1));
    assert!(found.hold.is_some() && found.attempt.is_none());
    // The attempt starts: the same record, the hold no longer expires.
    live.start(("j", 1));
    live.attempt_or_insert_with(("j", 1), || Attempt::new("t".into()));
    let found = live.find(("j", 1));
    assert_eq!(found.attempt.map(|a| &*a.tenant), Some("t"));
    assert_eq!(found.hold.and_then(|h| h.expires_at), None);
    assert_eq!(live.next_expiry_at(), None);
    // A hold released alone leaves the attempt; the end takes both.
    live.insert_new(("j", 2), hold(20));
    live.attempt_or_insert_with(("j", 2), || Attempt::new("t".into()));
    assert!(live.remove(("j", 2)).is_some());
    assert!(live.attempt(("j", 2)).is_some() && live.get(("j", 2)).is_none());
    assert_eq!(live.attempts().count(), 2);
    assert_eq!(live.uses_of("t"), (Ge::zero(), Ge::of(1, 7), Ge::zero()));
    let ended = live.end(("j", 1), |job, attempt| {
        (job.to_string(), attempt.is_some())
    });
    assert_eq!(ended, Some(("j".to_owned(), true)));
    assert_eq!(live.uses_of("t"), (Ge::zero(), Ge::zero(), Ge::zero()));
    assert_eq!(live.end(("j", 1), |_, _| ()), None);

    // Stored as the two lists the holds and the attempts were.
    live.insert_new(("k", 1), hold(30));
    let text = serde_json::to_value(&live).unwrap();
    assert_eq!(text["holds"].as_array().map(Vec::len), Some(1));
    assert_eq!(text["holds"][0][0], serde_json::json!(["k", 1]));
    assert_eq!(text["attempts"].as_array().map(Vec::len), Some(1));
    assert_eq!(text["attempts"][0][0], serde_json::json!(["j", 2]));
    let back: Live = serde_json::from_value(text).unwrap();
    assert_eq!(back, live);
}

#[test]
fn holds_expiring_together_come_in_attempt_order_and_leave_one_by_one() {
    let mut holds = Live::default();
    for (job, attempt) in [("b", 1), ("a", 2), ("c", 1), ("a", 1)] {
        holds.insert_new((job, attempt), hold(10));
    }
    holds.insert_new(("z", 1), hold(5));
    let next = |h: &Live| {
        h.next_expiry()
            .map(|(at, (j, a))| (at.as_micros(), j.to_owned(), a))
    };
    assert_eq!(next(&holds), Some((5, "z".into(), 1)));
    holds.remove(("z", 1));
    let mut order = Vec::new();
    while let Some((at, job, attempt)) = next(&holds) {
        assert_eq!(at, 10);
        order.push((job.clone(), attempt));
        holds.start((&job, attempt));
    }
    let expected: Vec<(String, i32)> = [("a", 1), ("a", 2), ("b", 1), ("c", 1)]
        .into_iter()
        .map(|(j, a)| (j.to_owned(), a))
        .collect();
    assert_eq!(order, expected);
    assert_eq!(holds.next_expiry_at(), None);
    // Started holds still count: four of 1/7 GE, all quota.
    assert_eq!(holds.uses_of("t"), (Ge::zero(), Ge::of(4, 7), Ge::zero()));
    assert_eq!(holds.use_of("t", HoldKind::Quota), Ge::of(4, 7));
    assert_eq!(holds.uses_of("u"), (Ge::zero(), Ge::zero(), Ge::zero()));
    // Removing one that is not due leaves the others due.
    holds.insert_new(("d", 1), hold(20));
    holds.insert_new(("e", 1), hold(20));
    holds.remove(("e", 1));
    assert_eq!(next(&holds), Some((20, "d".into(), 1)));
    // An instant before the last goes in its place, and leaves it.
    holds.insert_new(("g", 1), hold(30));
    holds.insert_new(("f", 1), hold(15));
    assert_eq!(next(&holds), Some((15, "f".into(), 1)));
    holds.start(("f", 1));
    holds.remove(("d", 1));
    assert_eq!(next(&holds), Some((30, "g".into(), 1)));
    holds.remove(("g", 1));
    assert_eq!(holds.next_expiry_at(), None);
}
