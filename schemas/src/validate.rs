//! Validation of events beyond their types (DESIGN §11): required text is
//! not empty, counts are positive, windows are ordered, inventory devices
//! fit their GPU. Errors name the event type, `event_id` and field.
//! Rules that need state (unknown pools, contradictions) belong to the ledger.

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::events::*;
use crate::exact::Decimal;
use crate::sample_datum::SampleRecord;
use crate::time::Timestamp;

/// The earliest instant an event may name: 2000-01-01T00:00:00Z.
pub const EARLIEST: Timestamp = Timestamp::from_secs(946_684_800);
/// The first instant an event may not name: 2100-01-01T00:00:00Z.
pub const LATEST: Timestamp = Timestamp::from_secs(4_102_444_800);
/// The most slices a GPU is divided into (MIG: seven on today's GPUs).
pub const MAX_SLICES: i32 = 8;

/// Checks one event, stopping at the first problem.
struct Check<'a> {
    event_type: EventType,
    event_id: &'a str,
}

/// All whitespace, or nothing. Every text field of every event is asked,
/// and nearly all begin with a visible ASCII character.
#[inline]
fn blank(value: &str) -> bool {
    match value.as_bytes().first() {
        Some(b) if b.is_ascii_graphic() => false,
        // Stops at the first character that is not whitespace.
        _ => value.chars().all(char::is_whitespace),
    }
}

impl Check<'_> {
    /// Kept out of line: the checks that pass, nearly all of them, stay
    /// small enough to be inlined where they are asked.
    #[cold]
    #[inline(never)]
    fn fail(&self, field: &str, message: impl Into<String>) -> Error {
        Error::field(self.event_type, self.event_id, field, message)
    }

    #[inline]
    fn text(&self, field: &str, value: &str) -> Result<()> {
        if blank(value) {
            return Err(self.fail(field, "must not be empty"));
        }
        Ok(())
    }

    /// [`Check::text`] for an item of a list, whose field name is spelled
    /// out only for an error: job events name their devices by the
    /// hundred thousand.
    fn item_text(&self, list: &str, index: usize, value: &str) -> Result<()> {
        if blank(value) {
            return self.text(&format!("{list}[{index}]"), value);
        }
        Ok(())
    }

    fn opt_text(&self, field: &str, value: &Option<String>) -> Result<()> {
        value.as_deref().map_or(Ok(()), |v| self.text(field, v))
    }

    fn at_least(&self, field: &str, value: i64, min: i64) -> Result<()> {
        if value < min {
            return Err(self.fail(field, format!("must be at least {min}, got {value}")));
        }
        Ok(())
    }

    fn not_negative(&self, field: &str, value: &Decimal) -> Result<()> {
        if value.is_negative() {
            return Err(self.fail(field, format!("must not be negative, got {value}")));
        }
        Ok(())
    }

    /// An instant from 2000 up to 2100.
    #[inline]
    fn time(&self, field: &str, value: Timestamp) -> Result<()> {
        if value < EARLIEST || value >= LATEST {
            return Err(self.fail(
                field,
                format!("{value} is outside {EARLIEST} .. {LATEST} (the years 2000 to 2099)"),
            ));
        }
        Ok(())
    }

    /// A slice count's denominator: 1 up to [`MAX_SLICES`].
    #[inline]
    fn max_slices(&self, field: &str, max_slices: i32) -> Result<()> {
        if max_slices > MAX_SLICES {
            return Err(self.fail(
                field,
                format!("must be at most {MAX_SLICES} (the slices of one GPU), got {max_slices}"),
            ));
        }
        self.at_least(field, max_slices.into(), 1)
    }

    /// A GE amount: `slices/max_slices`, both positive, at most
    /// [`MAX_SLICES`] slices to a GPU.
    fn ge(&self, slices: i32, max_slices: i32) -> Result<()> {
        self.at_least("slices", slices.into(), 1)?;
        self.max_slices("max_slices", max_slices)
    }

    /// A physical device: at most all of its GPU.
    fn device_ge(&self, prefix: &str, slices: i32, max_slices: i32) -> Result<()> {
        // Field names are only spelled out for an error: samples pass here
        // by the million.
        if slices < 1 {
            self.at_least(&format!("{prefix}slices"), slices.into(), 1)?;
        }
        if !(1..=MAX_SLICES).contains(&max_slices) {
            self.max_slices(&format!("{prefix}max_slices"), max_slices)?;
        }
        if slices > max_slices {
            return Err(self.fail(
                &format!("{prefix}slices"),
                format!(
                    "{slices} exceeds max_slices {max_slices} (a device is at most one whole GPU)"
                ),
            ));
        }
        Ok(())
    }

    fn percent(&self, field: &str, value: Option<f32>) -> Result<()> {
        match value {
            Some(v) if !(0.0..=100.0).contains(&v) => Err(self.fail(
                field,
                format!("must be a percentage between 0 and 100, got {v}"),
            )),
            _ => Ok(()),
        }
    }

    fn envelope(
        &self,
        event_id: &str,
        event_time: Timestamp,
        source: &str,
        cluster: &str,
    ) -> Result<()> {
        self.time("event_time", event_time)?;
        self.text("event_id", event_id)?;
        self.text("source", source)?;
        self.text("cluster", cluster)
    }

    /// The rules of a `GpuSample`'s own fields.
    fn sample(&self, s: &SampleRecord<'_>) -> Result<()> {
        self.text("node", s.node)?;
        self.text("pool", s.pool)?;
        self.text("device_uuid", s.device_uuid)?;
        self.text("model", s.model)?;
        self.device_ge("", s.slices, s.max_slices)?;
        self.percent("sm_util_pct", s.sm_util_pct)?;
        self.percent("mem_util_pct", s.mem_util_pct)?;
        self.at_least("mem_used_bytes", s.mem_used_bytes, 0)?;
        self.at_least("mem_total_bytes", s.mem_total_bytes, 0)?;
        self.at_least("interval_ms", s.interval_ms.into(), 1)?;
        self.at_least("seq", s.seq, 0)
    }

    fn cause(&self, partition: i32, offset: i64, cause_event_id: &str) -> Result<()> {
        self.at_least("ledger_partition", partition.into(), 0)?;
        self.at_least("ledger_offset", offset, 0)?;
        self.text("cause_event_id", cause_event_id)
    }
}

impl SampleRecord<'_> {
    /// Checks the sample against the contract's rules, as
    /// [`Event::validate`] checks the same sample owned.
    pub fn validate(&self) -> Result<()> {
        let c = Check {
            event_type: EventType::GpuSample,
            event_id: self.event_id,
        };
        c.envelope(self.event_id, self.event_time, self.source, self.cluster)?;
        c.sample(self)
    }
}

impl Event {
    /// Checks the event against the contract's rules that need no state.
    pub fn validate(&self) -> Result<()> {
        let env = &self.envelope;
        let c = Check {
            event_type: self.event_type(),
            event_id: &env.event_id,
        };
        c.envelope(&env.event_id, env.event_time, &env.source, &env.cluster)?;
        match &self.body {
            EventBody::NodeInventory(e) => {
                c.text("pool", &e.pool)?;
                c.text("node", &e.node)?;
                let mut seen = HashSet::new();
                for (i, d) in e.devices.iter().enumerate() {
                    let p = format!("devices[{i}].");
                    c.text(&format!("{p}device_uuid"), &d.device_uuid)?;
                    c.text(&format!("{p}model"), &d.model)?;
                    c.device_ge(&p, d.slices, d.max_slices)?;
                    c.at_least(&format!("{p}memory_bytes"), d.memory_bytes, 0)?;
                    c.opt_text(&format!("{p}parent_gpu_uuid"), &d.parent_gpu_uuid)?;
                    if !seen.insert(d.device_uuid.as_str()) {
                        return Err(c.fail(
                            &format!("{p}device_uuid"),
                            format!("{:?} is listed twice", d.device_uuid),
                        ));
                    }
                }
                if let Some(first) = e.devices.first()
                    && let Some((i, d)) = e
                        .devices
                        .iter()
                        .enumerate()
                        .find(|(_, d)| d.model != first.model)
                {
                    return Err(c.fail(
                        &format!("devices[{i}].model"),
                        format!(
                            "{:?} differs from {:?}: a pool holds one GPU model",
                            d.model, first.model
                        ),
                    ));
                }
            }
            EventBody::DeviceHealth(e) => {
                c.text("pool", &e.pool)?;
                c.text("node", &e.node)?;
                c.text("device_uuid", &e.device_uuid)?;
                if let Some(xid) = e.xid {
                    c.at_least("xid", xid.into(), 0)?;
                }
            }
            EventBody::MigAssignment(e) => {
                c.text("pool", &e.pool)?;
                c.text("node", &e.node)?;
                c.text("device_uuid", &e.device_uuid)?;
                c.text("parent_gpu_uuid", &e.parent_gpu_uuid)?;
                c.text("mig_profile", &e.mig_profile)?;
                c.device_ge("", e.slices, e.max_slices)?;
                c.opt_text("job_id", &e.job_id)?;
                c.opt_text("tenant", &e.tenant)?;
            }
            EventBody::JobEvent(e) => {
                c.text("pool", &e.pool)?;
                c.text("job_id", &e.job_id)?;
                c.at_least("attempt", e.attempt.into(), 1)?;
                c.text("tenant", &e.tenant)?;
                for (i, d) in e.devices.iter().flatten().enumerate() {
                    c.item_text("devices", i, d)?;
                }
                match (e.requested_slices, e.requested_max_slices) {
                    (Some(s), Some(m)) => {
                        c.at_least("requested_slices", s.into(), 1)?;
                        c.max_slices("requested_max_slices", m)?;
                    }
                    (None, None) => {}
                    (Some(_), None) => {
                        return Err(
                            c.fail("requested_max_slices", "is required with requested_slices")
                        );
                    }
                    (None, Some(_)) => {
                        return Err(
                            c.fail("requested_slices", "is required with requested_max_slices")
                        );
                    }
                }
                if let Some(units) = &e.work_units {
                    c.not_negative("work_units", units)?;
                }
                c.opt_text("work_unit_name", &e.work_unit_name)?;
            }
            EventBody::AdmissionRequest(e) => {
                c.text("pool", &e.pool)?;
                c.text("request_id", &e.request_id)?;
                c.text("job_id", &e.job_id)?;
                c.at_least("attempt", e.attempt.into(), 1)?;
                c.text("tenant", &e.tenant)?;
                c.ge(e.slices, e.max_slices)?;
            }
            EventBody::ReservationRequest(e) => {
                c.text("pool", &e.pool)?;
                c.text("reservation_id", &e.reservation_id)?;
                c.text("tenant", &e.tenant)?;
                c.ge(e.slices, e.max_slices)?;
                c.time("start", e.start)?;
                c.time("end", e.end)?;
                if e.end <= e.start {
                    return Err(c.fail("end", format!("{} is not after start {}", e.end, e.start)));
                }
            }
            EventBody::ReservationCancel(e) => {
                c.text("pool", &e.pool)?;
                c.text("reservation_id", &e.reservation_id)?;
                c.text("tenant", &e.tenant)?;
            }
            EventBody::TenantPolicy(e) => {
                c.text("pool", &e.pool)?;
                c.text("tenant", &e.tenant)?;
                c.not_negative("nominal_ge", &e.nominal_ge)?;
                c.not_negative("burst_ge", &e.burst_ge)?;
                if let Some(b) = &e.monthly_budget {
                    c.not_negative("monthly_budget", b)?;
                }
                if let Some(h) = &e.monthly_gpu_hours {
                    c.not_negative("monthly_gpu_hours", h)?;
                }
            }
            EventBody::PriceBook(e) => {
                c.opt_text("pool", &e.pool)?;
                c.at_least("version", e.version, 0)?;
                c.time("effective_from", e.effective_from)?;
                c.text("currency", &e.currency)?;
                if e.rates.is_empty() {
                    return Err(c.fail("rates", "must list at least one model"));
                }
                let mut models = HashSet::new();
                for (i, r) in e.rates.iter().enumerate() {
                    c.text(&format!("rates[{i}].model"), &r.model)?;
                    if !models.insert(r.model.as_str()) {
                        return Err(c.fail(
                            &format!("rates[{i}].model"),
                            format!("{:?} is listed twice", r.model),
                        ));
                    }
                    c.not_negative(
                        &format!("rates[{i}].reserved_per_gpu_hour"),
                        &r.reserved_per_gpu_hour,
                    )?;
                    c.not_negative(
                        &format!("rates[{i}].quota_per_gpu_hour"),
                        &r.quota_per_gpu_hour,
                    )?;
                    c.not_negative(
                        &format!("rates[{i}].on_demand_per_gpu_hour"),
                        &r.on_demand_per_gpu_hour,
                    )?;
                }
                if let Some(p) = &e.energy_per_kwh {
                    c.not_negative("energy_per_kwh", p)?;
                }
                c.not_negative("storage_per_gb_month", &e.storage_per_gb_month)?;
                c.not_negative("egress_per_gb", &e.egress_per_gb)?;
                c.not_negative("overhead_pct", &e.overhead_pct)?;
            }
            EventBody::UsageRecord(e) => {
                c.text("pool", &e.pool)?;
                c.text("tenant", &e.tenant)?;
                c.not_negative("quantity", &e.quantity)?;
                c.time("start", e.start)?;
                c.time("end", e.end)?;
                if e.end < e.start {
                    return Err(c.fail("end", format!("{} is before start {}", e.end, e.start)));
                }
            }
            EventBody::UnattributedProcess(e) => {
                c.text("pool", &e.pool)?;
                c.text("node", &e.node)?;
                c.text("device_uuid", &e.device_uuid)?;
                c.opt_text("tenant", &e.tenant)?;
            }
            EventBody::Clock(e) => {
                c.text("pool", &e.pool)?;
                if let Some(now) = e.now
                    && now != env.event_time
                {
                    return Err(c.fail(
                        "now",
                        format!("{now} differs from event_time {}", env.event_time),
                    ));
                }
            }
            EventBody::GpuSample(e) => c.sample(&SampleRecord::of(env, e))?,
            EventBody::AdmissionDecision(e) => {
                c.text("pool", &e.pool)?;
                c.text("request_id", &e.request_id)?;
                c.text("tenant", &e.tenant)?;
                c.cause(e.ledger_partition, e.ledger_offset, &e.cause_event_id)?;
            }
            EventBody::ReservationDecision(e) => {
                c.text("pool", &e.pool)?;
                c.text("reservation_id", &e.reservation_id)?;
                c.text("tenant", &e.tenant)?;
                c.cause(e.ledger_partition, e.ledger_offset, &e.cause_event_id)?;
            }
            EventBody::BurstTriggered(e) => {
                c.text("pool", &e.pool)?;
                c.text("tenant", &e.tenant)?;
                c.ge(e.slices, e.max_slices)?;
                c.cause(e.ledger_partition, e.ledger_offset, &e.cause_event_id)?;
            }
            EventBody::Reclassified(e) => {
                c.text("pool", &e.pool)?;
                c.text("tenant", &e.tenant)?;
                c.text("job_id", &e.job_id)?;
                c.cause(e.ledger_partition, e.ledger_offset, &e.cause_event_id)?;
            }
            EventBody::QuotaViolation(e) => {
                c.text("pool", &e.pool)?;
                c.text("tenant", &e.tenant)?;
                c.cause(e.ledger_partition, e.ledger_offset, &e.cause_event_id)?;
            }
            EventBody::BudgetAlert(e) => {
                c.text("pool", &e.pool)?;
                c.text("tenant", &e.tenant)?;
                if ![50, 80, 100].contains(&e.threshold_pct) {
                    return Err(c.fail(
                        "threshold_pct",
                        format!("must be 50, 80 or 100, got {}", e.threshold_pct),
                    ));
                }
                c.cause(e.ledger_partition, e.ledger_offset, &e.cause_event_id)?;
            }
            EventBody::UnmeteredUsage(e) => {
                c.text("pool", &e.pool)?;
                c.text("node", &e.node)?;
                c.text("device_uuid", &e.device_uuid)?;
                c.cause(e.ledger_partition, e.ledger_offset, &e.cause_event_id)?;
            }
        }
        Ok(())
    }
}
