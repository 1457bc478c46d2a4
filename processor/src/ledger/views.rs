//! Read-only views of the state for the control API: spare capacity over
//! time, the earliest window a reservation would be confirmed in, and a
//! tenant's quota, use and reservations. Pure functions of the state.

use gpuledger_schemas::Timestamp;
use gpuledger_schemas::events::HoldKind;

use super::{Ge, Ledger, Pool};

/// Free reservable capacity over one stretch of time.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub from: Timestamp,
    pub to: Timestamp,
    /// Spare − Σ confirmed reservations over the stretch (never below 0).
    pub free_ge: Ge,
}

/// A tenant's standing in one pool.
#[derive(Debug, Clone, PartialEq)]
pub struct TenantInPool {
    pub pool: String,
    pub nominal_ge: Ge,
    pub burst_ge: Ge,
    pub reserved_use: Ge,
    pub quota_use: Ge,
    pub burst_use: Ge,
    pub active_reserved_ge: Ge,
    /// (id, GE, start, end, confirmed) of reservations not yet over.
    pub reservations: Vec<(String, Ge, Timestamp, Timestamp, bool)>,
    /// Month-to-date spend as budgets count it, and GPU-hours held (`None`
    /// until a price book is in force).
    pub month_to_date: Option<(gpuledger_schemas::Rational, gpuledger_schemas::Rational)>,
    pub monthly_budget: Option<gpuledger_schemas::Decimal>,
    pub monthly_gpu_hours: Option<gpuledger_schemas::Decimal>,
}

impl Pool {
    /// The step function of free reservable capacity over [from, to),
    /// equal neighbours merged: one sweep of the booked steps.
    fn windows(&self, from: Timestamp, to: Timestamp) -> Vec<Window> {
        let spare = self.spare();
        let steps = super::reservations::booked_steps(self.reservations.values(), from, to);
        let mut out: Vec<Window> = Vec::new();
        for (i, (at, booked)) in steps.iter().enumerate() {
            let until = steps.get(i + 1).map_or(to, |(next, _)| *next);
            let free_ge = (spare.clone() - booked.clone()).clamp_zero();
            match out.last_mut() {
                Some(last) if last.free_ge == free_ge => last.to = until,
                _ => out.push(Window {
                    from: *at,
                    to: until,
                    free_ge,
                }),
            }
        }
        out
    }
}

impl Ledger {
    fn pool(&self, name: &str) -> Option<&Pool> {
        self.state.pools.get(name)
    }

    /// Free reservable capacity of `pool` over [from, to), as merged steps;
    /// `None` for a pool this ledger does not hold.
    pub fn availability(&self, pool: &str, from: Timestamp, to: Timestamp) -> Option<Vec<Window>> {
        let from = from.max(self.state.current());
        if to <= from {
            return self.pool(pool).map(|_| Vec::new());
        }
        self.pool(pool).map(|p| p.windows(from, to))
    }

    /// The earliest start at or after `from` (and not before now) where a
    /// reservation of `ge` for `micros` would be confirmed, looking as far
    /// as `horizon`.
    pub fn earliest_window(
        &self,
        pool: &str,
        ge: &Ge,
        micros: i64,
        from: Timestamp,
        horizon: Timestamp,
    ) -> Option<Timestamp> {
        let p = self.pool(pool)?;
        let from = from.max(self.state.current());
        let horizon = horizon.max(from);
        // The earliest start is `from` or the end of a stretch too full for
        // `ge` (anything later inside a fitting stretch could start at the
        // stretch's beginning); it fits if the next too-full stretch begins
        // `micros` or more after it. One pass over the windows, which reach
        // `micros` past the horizon.
        let windows = p.windows(from, horizon.plus_micros(micros));
        let mut candidate = from;
        for w in &windows {
            if w.free_ge >= *ge {
                continue;
            }
            if w.from >= candidate.plus_micros(micros) {
                break;
            }
            candidate = w.to;
            if candidate > horizon {
                return None;
            }
        }
        Some(candidate)
    }

    /// How many reservations `tenant` holds open in `pool` (0 for a pool
    /// this ledger does not hold).
    pub fn open_reservations(&self, pool: &str, tenant: &str) -> usize {
        self.pool(pool)
            .map_or(0, |p| p.reservations.open_of(tenant))
    }

    /// `tenant`'s quota, use and reservations in every pool of this ledger.
    pub fn tenant(&self, tenant: &str) -> Vec<TenantInPool> {
        let now = self.state.current();
        self.state
            .pools
            .iter()
            .filter(|(_, p)| {
                p.policies.contains_key(tenant)
                    || p.live.values().any(|h| *h.tenant == *tenant)
                    || p.reservations.values().any(|r| r.tenant == tenant)
            })
            .map(|(name, p)| {
                let (nominal_ge, burst_ge) = p.policy_ge(tenant);
                TenantInPool {
                    pool: name.to_owned(),
                    nominal_ge,
                    burst_ge,
                    reserved_use: p.use_of(tenant, HoldKind::Reserved),
                    quota_use: p.use_of(tenant, HoldKind::Quota),
                    burst_use: p.use_of(tenant, HoldKind::Burst),
                    active_reserved_ge: p.active_reserved(tenant, now),
                    reservations: p
                        .reservations
                        .iter()
                        .filter(|(_, r)| r.tenant == tenant && r.effective_end() > now)
                        .map(|(id, r)| {
                            (
                                id.clone(),
                                r.ge.clone(),
                                r.start,
                                r.effective_end(),
                                r.confirmed,
                            )
                        })
                        .collect(),
                    month_to_date: gpuledger_schemas::billing::month_to_date(
                        &self.records.billing,
                        name,
                        tenant,
                        now,
                    )
                    .ok(),
                    monthly_budget: p
                        .policies
                        .get(tenant)
                        .and_then(|p| p.monthly_budget.clone()),
                    monthly_gpu_hours: p
                        .policies
                        .get(tenant)
                        .and_then(|p| p.monthly_gpu_hours.clone()),
                }
            })
            .collect()
    }

    /// Whether this ledger holds `pool`.
    pub fn has_pool(&self, pool: &str) -> bool {
        self.state.pools.contains_key(pool)
    }

    /// What applying `event` would do, without doing it (a dry run).
    pub fn dry_run(
        &self,
        position: super::Position,
        event: &gpuledger_schemas::Event,
    ) -> super::Outcome {
        self.clone().apply(position, event)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests_support::*;
    use super::*;

    #[test]
    fn availability_steps_and_the_earliest_window() {
        // 8 GPUs, nominal 4 + 2: spare 2. res-1 books 2 over [03, 05).
        let mut lines = base();
        lines.push(reserve(
            "res-1",
            "team-a",
            2,
            "2026-11-03T00:00:00Z",
            "2026-11-05T00:00:00Z",
            T0,
        ));
        let ledger = ledger_of(&lines);
        let t = |s: &str| s.parse::<Timestamp>().unwrap();
        let steps = ledger
            .availability("p", t("2026-11-02T00:00:00Z"), t("2026-11-06T00:00:00Z"))
            .unwrap();
        let text: Vec<String> = steps
            .iter()
            .map(|w| format!("{}..{} {}", w.from, w.to, w.free_ge))
            .collect();
        assert_eq!(
            text,
            [
                "2026-11-02T00:00:00Z..2026-11-03T00:00:00Z 2",
                "2026-11-03T00:00:00Z..2026-11-05T00:00:00Z 0",
                "2026-11-05T00:00:00Z..2026-11-06T00:00:00Z 2",
            ]
        );
        // 1 GE for 48 h does not fit before res-1 (only 24 h free): it starts when res-1 ends.
        let start = ledger.earliest_window(
            "p",
            &Ge::of(1, 1),
            48 * 3_600_000_000,
            t(T0),
            t("2026-12-01T00:00:00Z"),
        );
        assert_eq!(start, Some(t("2026-11-05T00:00:00Z")));
        let start = ledger.earliest_window(
            "p",
            &Ge::of(1, 1),
            12 * 3_600_000_000,
            t(T0),
            t("2026-12-01T00:00:00Z"),
        );
        assert_eq!(start, Some(t(T0)));
        assert_eq!(
            ledger.earliest_window(
                "p",
                &Ge::of(3, 1),
                3_600_000_000,
                t(T0),
                t("2026-12-01T00:00:00Z")
            ),
            None
        );
        assert!(
            ledger
                .availability("nowhere", t(T0), t("2026-11-06T00:00:00Z"))
                .is_none()
        );

        let view = ledger.tenant("team-a");
        assert_eq!(view.len(), 1);
        assert_eq!(
            (view[0].nominal_ge.to_string(), view[0].reservations.len()),
            ("4".to_owned(), 1)
        );
    }
}
