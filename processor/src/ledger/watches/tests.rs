//! Tests of `watches`.

use super::*;

#[test]
fn products_divide_rounded_up_or_down_and_saturate() {
    for (a, b, c) in [
        (7, 3, 2),
        (6, 3, 2),
        (0, 5, 3),
        (1, 1, 1),
        (SCALE, 3_600, 7),
        // A product, or a divisor, past 64 bits.
        (SCALE * 1_000_000_000, 100_000, 7),
        (i128::from(u64::MAX), 1, 3),
        (i128::from(u64::MAX) + 1, 1, 3),
        (1 << 80, 3, (1 << 70) + 1),
    ] {
        let exact = Rational::from_i128_ratio(a * b, c).unwrap();
        assert_eq!(
            mul_div_down(a, b, c),
            exact.floor_i128().unwrap(),
            "{a}×{b}/{c}"
        );
        let up = mul_div_up(a, b, c);
        assert!(up == mul_div_down(a, b, c) + i128::from((a * b) % c != 0));
    }
    assert_eq!(mul_div_up(7, 3, 2), 11);
    assert_eq!(mul_div_up(6, 3, 2), 9);
    assert_eq!(mul_div_up(i128::MAX, 2, 3), i128::MAX);
    assert_eq!(mul_div_down(i128::MAX, 2, 3), i128::MAX);
}
