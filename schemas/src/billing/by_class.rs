//! A tenant's segments, priced class by class.
//!
//! A budget prices its tenant's month again and again: the rows closed
//! since it last asked, and the running ones. A busy tenant closes and runs
//! thousands. Over a stretch that one price book covers, on a pool where
//! no device ever failed, a segment's compute is the cost function of its
//! GE and its duration at its kind's rate, and that is linear in the
//! duration. So the segments of one kind, model and GE inside one such
//! stretch cost, together, the cost function of their summed durations,
//! exactly (amounts are rationals), and hold the GE-microseconds of their
//! summed durations. Segments outside those conditions are priced one by
//! one.

use std::sync::Arc;

use crate::exact::Rational;
use crate::pricing::{StatementLine, segment_amount};
use crate::time::Timestamp;

use super::BillingError;
use super::facts::{Facts, PoolFacts, Segment, UseKind};
use super::segments::Sums;

#[cfg(test)]
thread_local! {
    /// Set, every segment is priced alone: what the tests compare with.
    pub(super) static ONE_BY_ONE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Segments of one pool, within [from, to), summed by class.
pub(super) struct ByClass {
    /// Where the book in force may change, strictly inside (from, to).
    book_changes: Vec<Timestamp>,
    /// No device of the pool has a health report: no credit is due.
    healthy: bool,
    /// In the order first met.
    classes: Vec<Class>,
}

/// Segments priced together: the same stretch of one book, kind, model
/// and GE.
struct Class {
    /// How many book changes come at or before the stretch.
    stretch: usize,
    kind: UseKind,
    model: Arc<str>,
    slices: i64,
    max_slices: i64,
    /// Where the first member's share starts: the instant its rate is read
    /// at (one book covers every member).
    first_from: Timestamp,
    /// The members' durations inside [from, to), summed.
    micros: i64,
}

impl Class {
    fn holds(&self, stretch: usize, s: &Segment) -> bool {
        self.stretch == stretch
            && self.kind == s.kind
            && self.slices == s.slices
            && self.max_slices == s.max_slices
            && (Arc::ptr_eq(&self.model, &s.model) || self.model == s.model)
    }
}

impl ByClass {
    /// Ready for the segments of pool `name` over [from, to).
    pub(super) fn new(
        facts: &Facts,
        name: &str,
        pool: &PoolFacts,
        from: Timestamp,
        to: Timestamp,
    ) -> Self {
        Self {
            book_changes: facts.books().change_points(name, from, to),
            healthy: pool.health.is_empty(),
            classes: Vec::new(),
        }
    }

    /// Takes in the share [`a`, `b`) of `segment` if it may be priced with
    /// its class; `false` when it must be priced alone.
    pub(super) fn take(&mut self, segment: &Segment, a: Timestamp, b: Timestamp) -> bool {
        #[cfg(test)]
        if ONE_BY_ONE.get() {
            return false;
        }
        if !self.healthy || a >= b {
            return false;
        }
        let stretch = self.book_changes.partition_point(|c| *c <= a);
        if self.book_changes.get(stretch).is_some_and(|c| *c < b) {
            // The book changes inside the share.
            return false;
        }
        let micros = b.as_micros() - a.as_micros();
        match self.classes.iter_mut().find(|c| c.holds(stretch, segment)) {
            Some(class) => match class.micros.checked_add(micros) {
                Some(sum) => class.micros = sum,
                None => return false,
            },
            None => self.classes.push(Class {
                stretch,
                kind: segment.kind,
                model: Arc::clone(&segment.model),
                slices: segment.slices,
                max_slices: segment.max_slices,
                first_from: a,
                micros,
            }),
        }
        true
    }

    /// Adds each class taken in since the last time to `sums`: its compute
    /// on the line `line_of` its kind, and its GE-microseconds.
    pub(super) fn add_to(
        &mut self,
        facts: &Facts,
        name: &str,
        sums: &mut Sums,
        line_of: impl Fn(UseKind) -> StatementLine,
    ) -> Result<(), BillingError> {
        for class in self.classes.drain(..) {
            let rate =
                facts
                    .books()
                    .rate(name, &class.model, class.kind.rate_kind(), class.first_from)?;
            let amount = segment_amount(class.slices, class.max_slices, class.micros, &rate);
            let ge = Rational::new(class.slices, class.max_slices).unwrap_or_default();
            sums.ge_micros = sums.ge_micros.clone() + ge * Rational::from_integer(class.micros);
            sums.add(line_of(class.kind), amount);
        }
        Ok(())
    }
}
