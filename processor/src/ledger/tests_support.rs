//! A small language for ledger scenarios, shared by the state machine's tests.

use gpuledger_schemas::Event;

use super::{Ledger, LedgerConfig, Position};

// ---- a small scenario language -------------------------------------------

pub(super) const T0: &str = "2026-11-02T00:00:00Z";

pub(super) fn env(id: &str, at: &str) -> String {
    format!(r#""event_id":"{id}","event_time":"{at}","source":"test","cluster":"c""#)
}

/// A pool of `gpus` whole H200s on one node.
pub(super) fn inventory(pool: &str, gpus: usize, at: &str) -> String {
    let devices: Vec<String> = (0..gpus)
        .map(|i| format!(r#"{{"device_uuid":"GPU-{pool}-{i}","model":"NVIDIA H200","slices":7,"max_slices":7,"memory_bytes":1}}"#))
        .collect();
    format!(
        r#"{{"type":"NodeInventory",{},"pool":"{pool}","node":"{pool}-n1","devices":[{}]}}"#,
        env(&format!("inv-{pool}-{at}"), at),
        devices.join(",")
    )
}

pub(super) fn policy(tenant: &str, nominal: &str, burst: &str, at: &str) -> String {
    format!(
        r#"{{"type":"TenantPolicy",{},"pool":"p","tenant":"{tenant}","nominal_ge":"{nominal}","burst_ge":"{burst}","enforcement":"alert"}}"#,
        env(&format!("pol-{tenant}-{at}"), at)
    )
}

pub(super) fn admit(id: &str, tenant: &str, job: &str, slices: i32, max: i32, at: &str) -> String {
    format!(
        r#"{{"type":"AdmissionRequest",{},"pool":"p","request_id":"{id}","job_id":"{job}","attempt":1,"tenant":"{tenant}","slices":{slices},"max_slices":{max}}}"#,
        env(id, at)
    )
}

pub(super) fn job(job: &str, tenant: &str, state: &str, at: &str) -> String {
    format!(
        r#"{{"type":"JobEvent",{},"pool":"p","job_id":"{job}","attempt":1,"tenant":"{tenant}","state":"{state}","requested_slices":1,"requested_max_slices":1}}"#,
        env(&format!("{job}-{state}-{at}"), at)
    )
}

pub(super) fn reserve(id: &str, tenant: &str, ge: i32, start: &str, end: &str, at: &str) -> String {
    format!(
        r#"{{"type":"ReservationRequest",{},"pool":"p","reservation_id":"{id}","tenant":"{tenant}","slices":{ge},"max_slices":1,"start":"{start}","end":"{end}"}}"#,
        env(id, at)
    )
}

pub(super) fn cancel(id: &str, tenant: &str, at: &str) -> String {
    format!(
        r#"{{"type":"ReservationCancel",{},"pool":"p","reservation_id":"{id}","tenant":"{tenant}"}}"#,
        env(&format!("{id}-cancel"), at)
    )
}

pub(super) fn clock(at: &str) -> String {
    format!(
        r#"{{"type":"Clock",{},"pool":"p"}}"#,
        env(&format!("clock-{at}"), at)
    )
}

pub(super) fn health(state: &str, gpu: usize, at: &str) -> String {
    format!(
        r#"{{"type":"DeviceHealth",{},"pool":"p","node":"p-n1","device_uuid":"GPU-p-{gpu}","state":"{state}","reason":"test"}}"#,
        env(&format!("health-{gpu}-{at}"), at)
    )
}

/// A pool of 8 GPUs, team-a nominal 4 burst 2, team-b nominal 2 burst 1:
/// spare = 8 − 6 = 2.
pub(super) fn base() -> Vec<String> {
    vec![
        inventory("p", 8, T0),
        policy("team-a", "4", "2", T0),
        policy("team-b", "2", "1", T0),
    ]
}

/// A ledger after applying `lines` in order.
pub(super) fn ledger_of(lines: &[String]) -> Ledger {
    let mut ledger = Ledger::new(LedgerConfig::default());
    for (offset, line) in lines.iter().enumerate() {
        let event = Event::from_json_str(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        ledger.apply(
            Position {
                partition: 0,
                offset: offset as i64,
            },
            &event,
        );
    }
    ledger
}
