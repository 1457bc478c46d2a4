//! One event folded into the state (DESIGN §4): time moves to the event's,
//! timers due fire first, then the event's rule runs; once it applies, its
//! billing facts are taken in and the budget alerts now due go out.

use std::sync::Arc;

use gpuledger_schemas::billing::{Facts, Period};
use gpuledger_schemas::{Event, EventBody, Timestamp};

use super::decide::{Cause, Decisions};
use super::store::Records;
use super::{
    AppliedParts, Pool, Rejection, State, admission, budgets, jobs, reservations, timers, watches,
};

impl State {
    /// Applies `event` to this state and `records`. `timers_due`: whether
    /// [`timers::any_due`] said yes for this event's time (asked once, by
    /// the caller). Every rule checks everything before it changes
    /// anything, so a rejection leaves both as they were but for `now`,
    /// which the caller puts back.
    pub(crate) fn apply(
        &mut self,
        cause: &Cause<'_>,
        event: &Event,
        records: &mut Records,
        timers_due: bool,
    ) -> Result<AppliedParts, Rejection> {
        let at = event.envelope.event_time;
        let before = self.now;
        let now = self.now.map_or(at, |n| n.max(at));
        let mut out = Decisions::new(cause);
        // Timers due up to the new `now` fire first, in time order.
        if timers_due {
            timers::fire_due(self, now, &mut out);
        } else {
            out.at(now);
        }
        self.now = Some(now);
        let mut warnings = Vec::new();
        match &event.body {
            EventBody::NodeInventory(e) => match self.pools.get_mut(&e.pool) {
                Some(pool) => pool.inventory.replace_node(e, at)?,
                None => {
                    let mut pool = Pool {
                        name: e.pool.as_str().into(),
                        ..Pool::default()
                    };
                    pool.inventory.replace_node(e, at)?;
                    self.pools.insert(pool);
                }
            },
            EventBody::DeviceHealth(e) => {
                self.pool_mut(&e.pool)?.inventory.set_health(e, at);
            }
            EventBody::TenantPolicy(e) => {
                let pool = self.pool_mut(&e.pool)?;
                pool.policies.insert(&e.tenant, e.clone());
                let nominal = pool.policies.nominal_total().clone();
                let capacity = pool.inventory.capacity();
                if nominal > capacity {
                    warnings.push(format!(
                        "pool {}: nominal quotas add up to {nominal} GE, more than its capacity of {capacity} GE",
                        e.pool
                    ));
                }
                // A budget may have come or gone: look at every tenant.
                self.budget_watch.forget_quiet();
            }
            EventBody::PriceBook(e) => {
                // Kept with the billing facts, once the event applies.
                records.billing.books().check(e)?;
            }
            EventBody::UnattributedProcess(e) => {
                self.pool_mut(&e.pool)?;
                out.unmetered(e);
            }
            EventBody::MigAssignment(e) => {
                self.pool_mut(&e.pool)?;
            }
            EventBody::UsageRecord(e) => {
                self.pool_mut(&e.pool)?;
            }
            EventBody::Clock(e) => {
                self.pool_mut(&e.pool)?;
            }
            EventBody::AdmissionRequest(e) => admission::request(self, e, records, &mut out)?,
            EventBody::ReservationRequest(e) => reservations::request(self, e, &mut out)?,
            EventBody::ReservationCancel(e) => reservations::cancel(self, e, &mut out)?,
            EventBody::JobEvent(e) => jobs::apply(self, e, at, records, &mut out)?,
            other => {
                return Err(Rejection::NotLedgerEvent {
                    event_type: other.event_type().name(),
                });
            }
        }
        // The event applies: only now may the billing facts change.
        self.bill(
            &mut records.billing,
            event,
            before,
            now,
            &mut out,
            &mut warnings,
        );
        let (decisions, segments) = out.finish();
        Ok((decisions, warnings, segments))
    }

    /// Takes the event's billing facts in, forgets last month's at a month
    /// change, and gives the budget alerts now due.
    fn bill(
        &mut self,
        billing: &mut Facts,
        event: &Event,
        before: Option<Timestamp>,
        now: Timestamp,
        out: &mut Decisions<'_>,
        warnings: &mut Vec<String>,
    ) {
        let facts = || std::iter::once(event).chain(out.decisions().iter().map(|d| &**d));
        for e in facts() {
            if let Err(e) = billing.observe(e) {
                warnings.push(format!("billing facts: event not taken in: {e}"));
            }
        }
        for s in out.segments() {
            billing.segment(Arc::clone(s));
        }
        if self.config.budget_watch {
            watches::revise(&mut self.budget_watch, facts(), out.segments(), now);
        }
        // A month only changes where a day does.
        let new_month = before
            .filter(|b| b.day() != now.day())
            .map(|b| (Period::containing(b), Period::containing(now)))
            .and_then(|(was, is)| (was != is).then_some(is));
        if let Some(month) = new_month {
            billing.forget_before(month.start());
            let current = month.to_string();
            self.alerted.retain(|key| key.month == current);
            self.budget_watch.clear();
        }
        budgets::alerts(self, billing, now, out);
    }
}
