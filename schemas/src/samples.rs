//! One realistic event of every type, for tests, documentation and interop
//! checks with other Avro implementations.

use crate::events::*;
use crate::exact::{Decimal, Rational};
use crate::time::Timestamp;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap_or(Timestamp::from_micros(0))
}

fn dec(s: &str) -> Decimal {
    s.parse().unwrap_or_else(|_| Decimal::zero())
}

fn rat(s: &str) -> Rational {
    s.parse().unwrap_or_else(|_| Rational::zero())
}

fn envelope(id: &str, time: &str, source: &str) -> Envelope {
    Envelope {
        event_id: id.into(),
        event_time: ts(time),
        source: source.into(),
        cluster: "gpu-east-1".into(),
    }
}

/// One event of every [`EventType`], in [`EventType::ALL`] order, with
/// optional fields both set and unset across the set.
pub fn one_of_each() -> Vec<Event> {
    let mig = "MIG-090fc5d5-b77c-54f3-b182-2f3f87eddb98";
    let gpu = "GPU-428aea73-bf23-514b-832b-474566495af2";
    let model = "NVIDIA H200";
    let o = |s: &str| Some(s.to_owned());
    vec![
        Event::new(
            envelope("inv-1", "2026-11-01T00:00:00Z", "gpuledger-collector"),
            NodeInventory {
                pool: "h200".into(),
                node: "h200-n01".into(),
                devices: vec![
                    InventoryDevice {
                        device_uuid: mig.into(),
                        parent_gpu_uuid: o(gpu),
                        model: model.into(),
                        slices: 3,
                        max_slices: 7,
                        memory_bytes: 71_000_000_000,
                        mig_profile: o("3g.71gb"),
                    },
                    InventoryDevice {
                        device_uuid: "GPU-f5881925-1499-593a-be00-4d2908c8944c".into(),
                        parent_gpu_uuid: None,
                        model: model.into(),
                        slices: 7,
                        max_slices: 7,
                        memory_bytes: 141_000_000_000,
                        mig_profile: None,
                    },
                ],
            },
        ),
        Event::new(
            envelope(
                "health-1",
                "2026-11-04T03:12:00.250Z",
                "gpuledger-collector",
            ),
            DeviceHealth {
                pool: "h200".into(),
                node: "h200-n01".into(),
                device_uuid: gpu.into(),
                state: HealthState::Failed,
                xid: Some(79),
                reason: "GPU has fallen off the bus".into(),
            },
        ),
        Event::new(
            envelope("mig-1", "2026-11-02T09:00:00Z", "gpuledger-collector"),
            MigAssignment {
                pool: "h200".into(),
                node: "h200-n01".into(),
                device_uuid: mig.into(),
                parent_gpu_uuid: gpu.into(),
                mig_profile: "3g.71gb".into(),
                slices: 3,
                max_slices: 7,
                action: MigAction::Assigned,
                job_id: o("vision-train-101"),
                tenant: None,
            },
        ),
        Event::new(
            envelope("j-17-1-done", "2026-11-03T18:00:00Z", "slurm-epilog"),
            JobEvent {
                pool: "h200".into(),
                job_id: "j-17".into(),
                attempt: 1,
                tenant: "team-a".into(),
                user: o("alice"),
                node: o("h200-n01"),
                state: JobState::Completed,
                devices: Some(vec![mig.into()]),
                requested_slices: Some(3),
                requested_max_slices: Some(7),
                work_units: Some(dec("48000")),
                work_unit_name: o("steps"),
                exit_code: Some(0),
                reason: None,
            },
        ),
        Event::new(
            envelope("adm-17-1", "2026-11-03T07:59:00Z", "slurm-prolog"),
            AdmissionRequest {
                pool: "h200".into(),
                request_id: "adm-17-1".into(),
                job_id: "j-17".into(),
                attempt: 1,
                tenant: "team-a".into(),
                slices: 14,
                max_slices: 7,
            },
        ),
        Event::new(
            envelope("res-9", "2026-11-01T12:00:00Z", "control-api"),
            ReservationRequest {
                pool: "h200".into(),
                reservation_id: "res-9".into(),
                tenant: "team-b".into(),
                slices: 1,
                max_slices: 1,
                start: ts("2026-11-10T00:00:00Z"),
                end: ts("2026-11-12T00:00:00Z"),
            },
        ),
        Event::new(
            envelope("res-9-cancel", "2026-11-11T00:00:00Z", "control-api"),
            ReservationCancel {
                pool: "h200".into(),
                reservation_id: "res-9".into(),
                tenant: "team-b".into(),
            },
        ),
        Event::new(
            envelope("pol-a", "2026-11-01T00:00:00Z", "admin"),
            TenantPolicy {
                pool: "h200".into(),
                tenant: "team-a".into(),
                nominal_ge: dec("3"),
                burst_ge: dec("1.5"),
                monthly_budget: Some(dec("25000.00")),
                monthly_gpu_hours: None,
                enforcement: Enforcement::Deny,
            },
        ),
        Event::new(
            envelope("pb-1", "2026-10-01T00:00:00Z", "finance-pricing"),
            PriceBook {
                pool: None,
                version: 1,
                effective_from: ts("2026-10-01T00:00:00Z"),
                currency: "USD".into(),
                rates: vec![ModelRate {
                    model: model.into(),
                    reserved_per_gpu_hour: dec("2.45"),
                    quota_per_gpu_hour: dec("2.80"),
                    on_demand_per_gpu_hour: dec("4.90"),
                }],
                energy_per_kwh: Some(dec("0.12")),
                storage_per_gb_month: dec("0.08"),
                egress_per_gb: dec("0.05"),
                overhead_pct: dec("8"),
                reservation_charge: ReservationCharge::Window,
                idle_distribution: IdleDistribution::Proportional,
            },
        ),
        Event::new(
            envelope("use-1", "2026-11-02T00:00:00Z", "storage-exporter"),
            UsageRecord {
                pool: "h200".into(),
                tenant: "team-a".into(),
                kind: UsageKind::EgressBytes,
                quantity: dec("2500000000"),
                start: ts("2026-11-01T00:00:00Z"),
                end: ts("2026-11-02T00:00:00Z"),
            },
        ),
        Event::new(
            envelope("unattr-1", "2026-11-02T10:00:00Z", "gpuledger-collector"),
            UnattributedProcess {
                pool: "h200".into(),
                node: "h200-n01".into(),
                device_uuid: gpu.into(),
                pids: vec![4242, 4243],
                tenant: None,
            },
        ),
        Event::new(
            envelope("clock-1", "2026-11-02T11:00:00Z", "gpuledger-processor"),
            Clock {
                pool: "h200".into(),
                now: Some(ts("2026-11-02T11:00:00Z")),
            },
        ),
        Event::new(
            envelope("h200-n01:17", "2026-11-02T11:00:10Z", "h200-n01"),
            GpuSample {
                node: "h200-n01".into(),
                pool: "h200".into(),
                device_uuid: mig.into(),
                parent_gpu_uuid: o(gpu),
                model: model.into(),
                mig_profile: o("3g.71gb"),
                slices: 3,
                max_slices: 7,
                sm_util_pct: None,
                mem_util_pct: Some(41.5),
                mem_used_bytes: 30_000_000_000,
                mem_total_bytes: 71_000_000_000,
                power_mw: Some(402_000),
                energy_mj: Some(9_876_543_210),
                temp_c: Some(61),
                pids: vec![4242],
                job_id: o("j-17"),
                tenant: o("team-a"),
                interval_ms: 10_000,
                seq: 17,
            },
        ),
        Event::new(
            envelope(
                "adm-17-1/decision",
                "2026-11-03T07:59:00Z",
                "gpuledger-processor",
            ),
            AdmissionDecision {
                pool: "h200".into(),
                request_id: "adm-17-1".into(),
                job_id: "j-17".into(),
                attempt: 1,
                tenant: "team-a".into(),
                slices: 3,
                max_slices: 7,
                decision: AdmissionOutcome::Admit,
                kind: Some(HoldKind::Quota),
                reason: "within_quota".into(),
                entitled_ge: rat("3"),
                used_ge: rat("1/7"),
                ledger_partition: 0,
                ledger_offset: 19,
                cause_event_id: "adm-17-1".into(),
            },
        ),
        Event::new(
            envelope(
                "res-9/decision",
                "2026-11-01T12:00:00Z",
                "gpuledger-processor",
            ),
            ReservationDecision {
                pool: "h200".into(),
                reservation_id: "res-9".into(),
                tenant: "team-b".into(),
                slices: 1,
                max_slices: 1,
                start: ts("2026-11-10T00:00:00Z"),
                end: ts("2026-11-12T00:00:00Z"),
                decision: ReservationOutcome::Rejected,
                reason: "conflicts with res-4 over [2026-11-10T00:00:00Z, 2026-11-11T00:00:00Z)"
                    .into(),
                ledger_partition: 0,
                ledger_offset: 4,
                cause_event_id: "res-9".into(),
            },
        ),
        Event::new(
            envelope(
                "adm-18-1/burst",
                "2026-11-03T08:00:00Z",
                "gpuledger-processor",
            ),
            BurstTriggered {
                pool: "h200".into(),
                tenant: "team-a".into(),
                job_id: Some("j-18".into()),
                attempt: Some(1),
                slices: 1,
                max_slices: 1,
                billed_as: HoldKind::Burst,
                on_demand_rate: Some(dec("4.90")),
                ledger_partition: 0,
                ledger_offset: 22,
                cause_event_id: "adm-18-1".into(),
            },
        ),
        Event::new(
            envelope(
                "res-9/end/j-17",
                "2026-11-12T00:00:00Z",
                "gpuledger-processor",
            ),
            Reclassified {
                pool: "h200".into(),
                tenant: "team-b".into(),
                job_id: "j-17".into(),
                attempt: 1,
                from_kind: HoldKind::Reserved,
                to_kind: HoldKind::Quota,
                at: ts("2026-11-12T00:00:00Z"),
                ledger_partition: 0,
                ledger_offset: 40,
                cause_event_id: "clock-40".into(),
            },
        ),
        Event::new(
            envelope(
                "j-30-1/violation",
                "2026-11-05T00:00:00Z",
                "gpuledger-processor",
            ),
            QuotaViolation {
                pool: "h200".into(),
                tenant: "team-c".into(),
                job_id: Some("j-30".into()),
                attempt: Some(1),
                observed_ge: rat("10/7"),
                entitled_ge: rat("1"),
                action: Enforcement::Alert,
                reason: "unadmitted_start".into(),
                ledger_partition: 0,
                ledger_offset: 51,
                cause_event_id: "j-30-1-start".into(),
            },
        ),
        Event::new(
            envelope(
                "team-a/2026-11/80",
                "2026-11-20T00:00:00Z",
                "gpuledger-processor",
            ),
            BudgetAlert {
                pool: "h200".into(),
                tenant: "team-a".into(),
                budget_kind: BudgetKind::Money,
                threshold_pct: 80,
                spend: dec("20001.37"),
                budget: dec("25000.00"),
                month: "2026-11".into(),
                ledger_partition: 0,
                ledger_offset: 77,
                cause_event_id: "clock-77".into(),
            },
        ),
        Event::new(
            envelope(
                "unattr-1/unmetered",
                "2026-11-02T10:00:00Z",
                "gpuledger-processor",
            ),
            UnmeteredUsage {
                pool: "h200".into(),
                node: "h200-n01".into(),
                device_uuid: gpu.into(),
                pids: vec![4242, 4243],
                tenant: None,
                ledger_partition: 0,
                ledger_offset: 12,
                cause_event_id: "unattr-1".into(),
            },
        ),
    ]
}
