//! What an XID error says about a device: the one table that decides
//! `failed` from `degraded`.
//!
//! Source: NVIDIA's "XID Errors" catalogue (docs.nvidia.com/deploy/xid-errors)
//! and its GPU memory error management guide. The codes listed as `failed`
//! mean the device cannot be trusted to run work until it is reset or
//! replaced; every other XID leaves it `degraded` (still capacity, worth a
//! look). A later `healthy` report (after a reset) ends either state.

use gpuledger_schemas::events::{DeviceHealth, HealthState};
use gpuledger_schemas::{Event, Timestamp};

use super::{HealthKind, HealthSignal, NodeContext};

/// XIDs that take a device out of service, with what each means.
pub const FAILED_XIDS: &[(u64, &str)] = &[
    (48, "double-bit ECC error"),
    (63, "ECC page retirement or row remapping recorded"),
    (64, "ECC page retirement or row remapping failed"),
    (74, "NVLink error"),
    (79, "GPU has fallen off the bus"),
    (92, "high single-bit ECC error rate"),
    (94, "contained ECC error"),
    (95, "uncontained ECC error"),
];

/// The state an XID puts a device in.
pub fn state_of_xid(xid: u64) -> HealthState {
    if FAILED_XIDS.iter().any(|(code, _)| *code == xid) {
        HealthState::Failed
    } else {
        HealthState::Degraded
    }
}

/// The `DeviceHealth` event a signal becomes; `None` for signals that are
/// not about health (a MIG reconfiguration).
pub fn health_event(ctx: &NodeContext, signal: &HealthSignal, at: Timestamp) -> Option<Event> {
    let (state, xid, reason) = match &signal.kind {
        HealthKind::Xid(code) => {
            let meaning = FAILED_XIDS
                .iter()
                .find(|(c, _)| c == code)
                .map_or("see NVIDIA's XID catalogue", |(_, m)| m);
            (
                state_of_xid(*code),
                i32::try_from(*code).ok(),
                format!("XID {code}: {meaning}"),
            )
        }
        HealthKind::EccUncorrectable => (
            HealthState::Failed,
            None,
            "uncorrectable (double-bit) ECC error".to_owned(),
        ),
        HealthKind::MigReconfigured => return None,
    };
    let id = format!(
        "{}:health:{}:{}",
        ctx.source,
        signal.device_uuid,
        at.as_micros()
    );
    Some(Event::new(
        ctx.envelope(id, at),
        DeviceHealth {
            pool: ctx.pool.clone(),
            node: ctx.node.clone(),
            device_uuid: signal.device_uuid.clone(),
            state,
            xid,
            reason,
        },
    ))
}
