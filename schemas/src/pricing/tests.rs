//! Every expected amount below is worked out by hand in the comment above it.

use super::*;
use crate::events::{IdleDistribution, ModelRate, ReservationCharge};

const H200: &str = "NVIDIA H200";

fn d(s: &str) -> Decimal {
    s.parse().unwrap()
}

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn book(version: i64, from: &str, quota: &str) -> PriceBook {
    PriceBook {
        pool: None,
        version,
        effective_from: t(from),
        currency: "USD".into(),
        rates: vec![ModelRate {
            model: H200.into(),
            reserved_per_gpu_hour: d("2.45"),
            quota_per_gpu_hour: d(quota),
            on_demand_per_gpu_hour: d("4.90"),
        }],
        energy_per_kwh: Some(d("0.12")),
        storage_per_gb_month: d("0.08"),
        egress_per_gb: d("0.05"),
        overhead_pct: d("8"),
        reservation_charge: ReservationCharge::Window,
        idle_distribution: IdleDistribution::Central,
    }
}

fn usage(
    kind: RateKind,
    slices: i64,
    max_slices: i64,
    start: &str,
    end: &str,
) -> GpuUsage<'static> {
    GpuUsage {
        pool: "h200",
        model: H200,
        kind,
        slices,
        max_slices,
        start: t(start),
        end: t(end),
    }
}

fn cents(r: &Rational) -> String {
    r.round_half_even(2).to_string()
}

#[test]
fn three_sevenths_for_two_hours_at_quota() {
    // 3 × 7200 s × 2.10 / (7 × 3600) = 3 × 2 × 2.10 / 7 = 12.60 / 7 = 1.80
    let mut books = PriceBooks::new();
    books
        .insert(book(1, "2026-11-01T00:00:00Z", "2.10"))
        .unwrap();
    let amount = books
        .compute_cost(&usage(
            RateKind::Quota,
            3,
            7,
            "2026-11-02T08:00:00Z",
            "2026-11-02T10:00:00Z",
        ))
        .unwrap();
    assert_eq!(amount, "1.8".parse().unwrap());
}

#[test]
fn one_seventh_is_carried_exactly_and_rounded_once() {
    // 1/7 GE × 1 h × 1.00 = 1/7 = 0.142857… per segment. Three segments sum
    // exactly to 3/7 = 0.428571… → 0.43; rounding each first would give 0.42.
    let rate: Rational = "1.00".parse().unwrap();
    let one = segment_amount(1, 7, MICROS_PER_HOUR, &rate);
    assert_eq!(one.to_string(), "1/7");
    let sum: Rational = (0..3).map(|_| one.clone()).sum();
    assert_eq!(cents(&sum), "0.43");
    assert_eq!(cents(&one), "0.14");
}

#[test]
fn burst_is_billed_at_on_demand_and_whole_gpus_may_exceed_max_slices() {
    // 2 whole GPUs (2/1) × 90 min × 4.90 = 2 × 1.5 × 4.90 = 14.70
    let mut books = PriceBooks::new();
    books
        .insert(book(1, "2026-11-01T00:00:00Z", "2.80"))
        .unwrap();
    let kind = RateKind::from(HoldKind::Burst);
    let amount = books
        .compute_cost(&usage(
            kind,
            2,
            1,
            "2026-11-05T00:00:00Z",
            "2026-11-05T01:30:00Z",
        ))
        .unwrap();
    assert_eq!(cents(&amount), "14.70");
    // 14/7 is the same two GPUs.
    let same = books
        .compute_cost(&usage(
            kind,
            14,
            7,
            "2026-11-05T00:00:00Z",
            "2026-11-05T01:30:00Z",
        ))
        .unwrap();
    assert_eq!(amount, same);
}

#[test]
fn a_segment_splits_where_the_book_changes() {
    // v1 quota 2.00 until midnight, v2 quota 3.00 after:
    // 1 GPU 23:00–01:00 = 1 h × 2.00 + 1 h × 3.00 = 5.00
    let mut books = PriceBooks::new();
    books
        .insert(book(2, "2026-11-10T00:00:00Z", "3.00"))
        .unwrap();
    books
        .insert(book(1, "2026-11-01T00:00:00Z", "2.00"))
        .unwrap();
    let amount = books
        .compute_cost(&usage(
            RateKind::Quota,
            1,
            1,
            "2026-11-09T23:00:00Z",
            "2026-11-10T01:00:00Z",
        ))
        .unwrap();
    assert_eq!(amount, Rational::from_integer(5));
}

#[test]
fn equal_effective_from_higher_version_wins_whatever_the_arrival_order() {
    let mut books = PriceBooks::new();
    books
        .insert(book(7, "2026-11-01T00:00:00Z", "3.00"))
        .unwrap();
    books
        .insert(book(6, "2026-11-01T00:00:00Z", "2.00"))
        .unwrap();
    let rate = books
        .rate("h200", H200, RateKind::Quota, t("2026-11-02T00:00:00Z"))
        .unwrap();
    assert_eq!(rate, Rational::from_integer(3));
}

#[test]
fn the_same_book_twice_is_a_no_op_but_different_content_conflicts() {
    let mut books = PriceBooks::new();
    books
        .insert(book(1, "2026-11-01T00:00:00Z", "2.00"))
        .unwrap();
    books
        .insert(book(1, "2026-11-01T00:00:00Z", "2.00"))
        .unwrap();
    assert_eq!(books.books().len(), 1);
    let err = books
        .insert(book(1, "2026-11-01T00:00:00Z", "2.50"))
        .unwrap_err();
    assert!(
        matches!(err, PricingError::Conflict { version: 1, .. }),
        "{err}"
    );
}

#[test]
fn time_no_book_prices_is_an_error_naming_pool_and_instant() {
    let mut books = PriceBooks::new();
    books
        .insert(book(1, "2026-11-01T00:00:00Z", "2.00"))
        .unwrap();
    let err = books
        .compute_cost(&usage(
            RateKind::Quota,
            1,
            1,
            "2026-10-31T23:00:00Z",
            "2026-11-01T01:00:00Z",
        ))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "no price book is in force for pool \"h200\" at 2026-10-31T23:00:00Z"
    );
    let err = books
        .rate(
            "h200",
            "NVIDIA A100",
            RateKind::Quota,
            t("2026-11-02T00:00:00Z"),
        )
        .unwrap_err();
    assert!(err.to_string().contains("\"NVIDIA A100\""), "{err}");
}

#[test]
fn pool_specific_books_apply_only_to_their_pool() {
    let mut books = PriceBooks::new();
    books
        .insert(book(1, "2026-11-01T00:00:00Z", "2.00"))
        .unwrap();
    let mut special = book(2, "2026-11-15T00:00:00Z", "1.00");
    special.pool = Some("h200-spot".into());
    books.insert(special).unwrap();
    let at = t("2026-11-20T00:00:00Z");
    assert_eq!(
        books.rate("h200", H200, RateKind::Quota, at).unwrap(),
        Rational::from_integer(2)
    );
    assert_eq!(
        books.rate("h200-spot", H200, RateKind::Quota, at).unwrap(),
        Rational::from_integer(1)
    );
    assert!(
        books
            .change_points("h200", t("2026-11-01T00:00:00Z"), t("2026-12-01T00:00:00Z"))
            .is_empty()
    );
}

#[test]
fn storage_egress_energy_and_overhead() {
    let b = book(1, "2026-11-01T00:00:00Z", "2.80");
    // 1460 GB-hours / 730 = 2 GB-months × 0.08 = 0.16
    assert_eq!(cents(&storage_amount(&d("1460"), &b)), "0.16");
    // 2.5 × 10⁹ bytes = 2.5 GB × 0.05 = 0.125 → half-to-even 0.12
    assert_eq!(storage_amount(&d("0"), &b), Rational::zero());
    let egress = egress_amount(&d("2500000000"), &b);
    assert_eq!(egress, "0.125".parse().unwrap());
    assert_eq!(cents(&egress), "0.12");
    // 7.2 × 10⁹ mJ = 2 kWh × 0.12 = 0.24
    assert_eq!(cents(&energy_amount(7_200_000_000, &b)), "0.24");
    // 8 % of 638.40 = 51.072 → 51.07 (the worked example's team-llm line)
    assert_eq!(
        cents(&overhead_amount(&"638.40".parse().unwrap(), &b)),
        "51.07"
    );
    let mut no_energy = b.clone();
    no_energy.energy_per_kwh = None;
    assert_eq!(energy_amount(7_200_000_000, &no_energy), Rational::zero());
}

#[test]
fn statement_lines_are_named_as_the_contract_says() {
    let names: Vec<&str> = StatementLine::ALL.iter().map(|l| l.as_str()).collect();
    assert_eq!(
        names,
        [
            "compute_reserved",
            "compute_quota",
            "compute_burst",
            "reservation_unused",
            "energy",
            "storage",
            "data_movement",
            "health_credit",
            "shared_idle",
            "overhead",
            "total"
        ]
    );
}

proptest::proptest! {
    /// The one-fraction form of the cost function gives exactly the value
    /// of its three products, small parts or large.
    #[test]
    fn ge_amount_equals_the_product_of_its_parts(
        slices in 0i64..64,
        max_slices in 1i64..9,
        micros in -1i64..i64::MAX,
        rate_cents in 0i64..i64::MAX,
        rate_scale in 0u32..7,
    ) {
        let ge = Rational::new(slices, max_slices).unwrap();
        let rate = Rational::new(rate_cents, 10i64.pow(rate_scale)).unwrap();
        let products = (ge.clone() * Rational::from_integer(micros) * rate.clone())
            .checked_div(&Rational::from_integer(3_600_000_000))
            .unwrap();
        proptest::prop_assert_eq!(ge_amount(&ge, micros, &rate), products);
    }
}
