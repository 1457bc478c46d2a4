//! Building decision events: each names the ledger position and the event
//! that caused it, carries the state machine's `now` as its time and gets an
//! `event_id` derived from its cause, so a replay produces the same ids.

use std::sync::Arc;

use gpuledger_schemas::billing::Segment;
use gpuledger_schemas::events::*;
use gpuledger_schemas::{Envelope, Event, EventBody, Text, Timestamp};

use super::{Ge, Position, Produced};

/// The `source` of every decision.
pub(crate) const SOURCE: &str = "gpuledger-processor";

/// [`SOURCE`], shared by every decision.
pub(crate) fn source() -> Text {
    static TEXT: std::sync::LazyLock<Text> = std::sync::LazyLock::new(|| Text::from(SOURCE));
    TEXT.clone()
}

/// What an admission decision's `event_id` names it (its last part).
pub(crate) const ADMISSION: &str = "admission";

/// The `event_id` of the `n`th decision (a `what`) caused by the event
/// `cause`: the same on every replay.
pub(crate) fn decision_id(cause: &str, n: usize, what: &str) -> Text {
    // One is made per decision: sized once, and the index written digit by
    // digit (the formatting machinery costs more than the rest).
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n;
    loop {
        at -= 1;
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    let digits = &digits[at..];
    let parts = [cause.as_bytes(), b"/", digits, b"/", what.as_bytes()];
    let len: usize = parts.iter().map(|p| p.len()).sum();
    // Put together on the stack and copied once, into the shared text.
    let mut buffer = [0u8; 256];
    if len > buffer.len() {
        return Text::from(format!("{cause}/{n}/{what}"));
    }
    let mut end = 0;
    for part in parts {
        buffer[end..end + part.len()].copy_from_slice(part);
        end += part.len();
    }
    // Two whole `str`s joined by ASCII: always UTF-8, so the fallback
    // never runs; it keeps the function total without `unsafe`.
    match std::str::from_utf8(&buffer[..len]) {
        Ok(id) => Text::from(id),
        Err(_) => Text::from(format!("{cause}/{n}/{what}")),
    }
}

/// The event being applied: what every decision it causes points back to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cause<'e> {
    position: Position,
    event_id: &'e Text,
    cluster: &'e Text,
}

impl<'e> Cause<'e> {
    pub(crate) fn new(position: Position, event: &'e Event) -> Self {
        Self {
            position,
            event_id: &event.envelope.event_id,
            cluster: &event.envelope.cluster,
        }
    }
}

/// The decisions one applied event produces, in order.
#[derive(Debug)]
pub(crate) struct Decisions<'a> {
    cause: &'a Cause<'a>,
    out: Produced<Arc<Event>>,
    segments: Produced<Arc<Segment>>,
    now: Timestamp,
}

/// Where money is not known, the rate is left out.
fn ge_text(ge: &Ge) -> gpuledger_schemas::Rational {
    ge.to_rational()
}

impl<'a> Decisions<'a> {
    pub(crate) fn new(cause: &'a Cause<'a>) -> Self {
        Self {
            cause,
            out: Produced::new(),
            segments: Produced::new(),
            now: Timestamp::from_micros(0),
        }
    }

    /// Sets the time decisions from here on are made at.
    pub(crate) fn at(&mut self, now: Timestamp) {
        self.now = now;
    }

    /// The decisions, and the billing segment rows opened or closed.
    pub(crate) fn finish(self) -> (Produced<Arc<Event>>, Produced<Arc<Segment>>) {
        (self.out, self.segments)
    }

    /// A billing segment row: opened, or closed.
    pub(crate) fn segment(&mut self, row: Segment) {
        self.segments.push(Arc::new(row));
    }

    /// The envelope of the next decision, a `what`.
    #[inline]
    fn envelope(&self, what: &str) -> Envelope {
        Envelope {
            event_id: decision_id(self.cause.event_id, self.out.len(), what),
            event_time: self.now,
            source: source(),
            cluster: self.cause.cluster.clone(),
        }
    }

    fn push(&mut self, what: &str, body: impl Into<EventBody>) {
        let event = Event {
            envelope: self.envelope(what),
            body: body.into(),
        };
        self.push_event(Arc::new(event));
    }

    fn push_event(&mut self, event: Arc<Event>) {
        self.out.push(event);
    }

    pub(crate) fn partition(&self) -> i32 {
        self.cause.position.partition
    }

    pub(crate) fn offset(&self) -> i64 {
        self.cause.position.offset
    }

    pub(crate) fn cause_id(&self) -> Text {
        self.cause.event_id.clone()
    }

    /// Decides an admission request; gives the decision, kept among this
    /// event's, and its index there (the middle of its `event_id`). The
    /// reason is taken, not copied: each count of a shared text changed
    /// is an atomic instruction.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn admission(
        &mut self,
        request: &AdmissionRequest,
        decision: AdmissionOutcome,
        kind: Option<HoldKind>,
        reason: Text,
        entitled: &Ge,
        used: &Ge,
    ) -> (&Arc<Event>, u32) {
        let index = self.out.len();
        // Built where it is kept: the event is large, and each move
        // between builder functions copies it.
        let body = EventBody::AdmissionDecision(AdmissionDecision {
            pool: request.pool.clone(),
            request_id: request.request_id.clone(),
            job_id: request.job_id.clone(),
            attempt: request.attempt,
            tenant: request.tenant.clone(),
            slices: request.slices,
            max_slices: request.max_slices,
            decision,
            kind,
            reason,
            entitled_ge: ge_text(entitled),
            used_ge: ge_text(used),
            ledger_partition: self.partition(),
            ledger_offset: self.offset(),
            cause_event_id: self.cause_id(),
        });
        let event = Arc::new(Event {
            envelope: self.envelope(ADMISSION),
            body,
        });
        self.push_event(event);
        let number = u32::try_from(index)
            .unwrap_or_else(|_| unreachable!("more than 2^32 decisions from one event"));
        (&self.out[index], number)
    }

    /// Repeats an earlier decision unchanged (a retried request).
    pub(crate) fn repeat(&mut self, decision: Arc<Event>) {
        self.push_event(decision);
    }

    pub(crate) fn reservation(
        &mut self,
        r: &ReservationRequest,
        decision: ReservationOutcome,
        reason: &str,
    ) {
        self.reservation_parts(
            &r.pool,
            &r.reservation_id,
            &r.tenant,
            r.slices,
            r.max_slices,
            r.start,
            r.end,
            decision,
            reason,
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn reservation_parts(
        &mut self,
        pool: &str,
        reservation_id: &str,
        tenant: &str,
        slices: i32,
        max_slices: i32,
        start: Timestamp,
        end: Timestamp,
        decision: ReservationOutcome,
        reason: &str,
    ) {
        let body = ReservationDecision {
            pool: pool.into(),
            reservation_id: reservation_id.to_owned(),
            tenant: tenant.into(),
            slices,
            max_slices,
            start,
            end,
            decision,
            reason: reason.into(),
            ledger_partition: self.partition(),
            ledger_offset: self.offset(),
            cause_event_id: self.cause_id(),
        };
        self.push("reservation", body);
    }

    pub(crate) fn burst(
        &mut self,
        pool: &Text,
        tenant: &Text,
        job: Option<(&Text, i32)>,
        shortfall: &Ge,
        billed_as: HoldKind,
    ) {
        let (slices, max_slices) = ge_parts(shortfall);
        let body = BurstTriggered {
            pool: pool.clone(),
            tenant: tenant.clone(),
            job_id: job.map(|(j, _)| j.clone()),
            attempt: job.map(|(_, a)| a),
            slices,
            max_slices,
            billed_as,
            on_demand_rate: None,
            ledger_partition: self.partition(),
            ledger_offset: self.offset(),
            cause_event_id: self.cause_id(),
        };
        self.push("burst", body);
    }

    pub(crate) fn reclassified(
        &mut self,
        pool: &str,
        tenant: &str,
        job: (&str, i32),
        from: HoldKind,
        to: HoldKind,
        at: Timestamp,
    ) {
        let body = Reclassified {
            pool: pool.into(),
            tenant: tenant.into(),
            job_id: job.0.into(),
            attempt: job.1,
            from_kind: from,
            to_kind: to,
            at,
            ledger_partition: self.partition(),
            ledger_offset: self.offset(),
            cause_event_id: self.cause_id(),
        };
        self.push("reclassified", body);
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn violation(
        &mut self,
        pool: &str,
        tenant: &str,
        job: Option<(&str, i32)>,
        observed: &Ge,
        entitled: &Ge,
        action: Enforcement,
        reason: &str,
    ) {
        let body = QuotaViolation {
            pool: pool.into(),
            tenant: tenant.into(),
            job_id: job.map(|(j, _)| j.into()),
            attempt: job.map(|(_, a)| a),
            observed_ge: ge_text(observed),
            entitled_ge: ge_text(entitled),
            action,
            reason: reason.into(),
            ledger_partition: self.partition(),
            ledger_offset: self.offset(),
            cause_event_id: self.cause_id(),
        };
        self.push("violation", body);
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn budget_alert(
        &mut self,
        pool: &str,
        tenant: &str,
        kind: BudgetKind,
        threshold_pct: i32,
        spend: gpuledger_schemas::Decimal,
        budget: gpuledger_schemas::Decimal,
        month: &str,
    ) {
        let body = BudgetAlert {
            pool: pool.into(),
            tenant: tenant.into(),
            budget_kind: kind,
            threshold_pct,
            spend,
            budget,
            month: month.to_owned(),
            ledger_partition: self.partition(),
            ledger_offset: self.offset(),
            cause_event_id: self.cause_id(),
        };
        self.push("budget", body);
    }

    /// The decisions so far.
    pub(crate) fn decisions(&self) -> &[Arc<Event>] {
        &self.out
    }

    /// The billing segment rows so far.
    pub(crate) fn segments(&self) -> &[Arc<Segment>] {
        &self.segments
    }

    pub(crate) fn unmetered(&mut self, e: &UnattributedProcess) {
        let body = UnmeteredUsage {
            pool: e.pool.as_str().into(),
            node: e.node.clone(),
            device_uuid: e.device_uuid.clone(),
            pids: e.pids.clone(),
            tenant: e.tenant.as_deref().map(Text::from),
            ledger_partition: self.partition(),
            ledger_offset: self.offset(),
            cause_event_id: self.cause_id(),
        };
        self.push("unmetered", body);
    }
}

/// A GE amount as (slices, max_slices) for the wire: the reduced fraction,
/// saturating where a fraction does not fit an Avro int.
fn ge_parts(ge: &Ge) -> (i32, i32) {
    match ge.to_i64_pair() {
        Some((n, d)) => (
            i32::try_from(n).unwrap_or(i32::MAX),
            i32::try_from(d).unwrap_or(1),
        ),
        None => (i32::MAX, 1),
    }
}

#[cfg(test)]
mod tests {
    use super::{Ge, decision_id, ge_parts};

    #[test]
    fn ge_parts_are_slices_of_a_whole_in_lowest_terms() {
        assert_eq!(ge_parts(&Ge::of(3, 7)), (3, 7));
        assert_eq!(ge_parts(&Ge::of(14, 7)), (2, 1));
        assert_eq!(ge_parts(&Ge::of(4, 8)), (1, 2));
        assert_eq!(ge_parts(&Ge::of(1, 9)), (1, 9));
        assert_eq!(ge_parts(&Ge::zero()), (0, 1));
        // More GPUs than an i32 counts: saturated.
        let many = Ge::of(i32::MAX, 1) + Ge::of(i32::MAX, 1);
        assert_eq!(ge_parts(&many), (i32::MAX, 1));
    }

    #[test]
    fn decision_ids_read_cause_index_and_kind() {
        for n in [0, 7, 10, 1_234_567, usize::MAX] {
            assert_eq!(decision_id("req-9", n, "burst"), format!("req-9/{n}/burst"));
        }
        // Multi-byte characters come through whole.
        assert_eq!(decision_id("ré-✓", 3, "burst"), "ré-✓/3/burst");
        // Longer than the stack buffer: put together on the heap.
        let long = "é".repeat(200);
        assert_eq!(
            decision_id(&long, 12, "admission"),
            format!("{long}/12/admission")
        );
    }
}
