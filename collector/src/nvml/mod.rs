//! The NVML source: what the node's GPUs report, turned into contract
//! events (`NodeInventory`, `GpuSample`, `MigAssignment`, `DeviceHealth`).
//!
//! The NVML calls sit behind [`GpuSource`]: [`real::RealNvml`] calls the
//! driver through `nvml-wrapper`; [`fake::FakeNvml`] replays readings for
//! tests and benchmarks. Everything after the readings — MIG layout, units,
//! attribution, the events — is plain code over [`GpuReading`]s, tested
//! with the fake.
//!
//! A value NVML does not support on a device is `None`, never 0.

pub mod fake;
mod ids;
pub mod real;
pub mod xid;

use std::collections::BTreeMap;

use gpuledger_schemas::events::{
    GpuSample, InventoryDevice, MigAction, MigAssignment, NodeInventory,
};
use gpuledger_schemas::{Envelope, Event, Timestamp};

use crate::attribution::{Attribution, Attributor};

/// One running compute process, as NVML lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessReading {
    pub pid: u32,
    pub used_memory_bytes: Option<u64>,
    /// Set on MIG-enabled GPUs only.
    pub gpu_instance_id: Option<u32>,
    pub compute_instance_id: Option<u32>,
}

/// One MIG device (a compute instance) of a MIG-enabled GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct MigReading {
    pub uuid: String,
    /// The profile, from the device name (`NVIDIA H200 MIG 1g.18gb` →
    /// `1g.18gb`).
    pub profile: Option<String>,
    /// GPU-instance slices it holds (`attributes().gpu_instance_slice_count`).
    pub slices: u32,
    pub gpu_instance_id: Option<u32>,
    pub memory_total_bytes: u64,
    pub memory_used_bytes: u64,
    /// SM activity over the last interval from GPM on the parent, Hopper
    /// and later; `None` where GPM is unsupported or no interval has passed.
    pub sm_activity_pct: Option<f64>,
    pub processes: Vec<ProcessReading>,
}

/// One whole GPU at one moment.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuReading {
    pub index: u32,
    pub uuid: String,
    /// The model, as NVML names it (`NVIDIA H200`).
    pub name: String,
    pub memory_total_bytes: u64,
    pub memory_used_bytes: u64,
    pub gpu_util_pct: Option<u32>,
    pub mem_util_pct: Option<u32>,
    pub power_mw: Option<u32>,
    /// Energy since the driver loaded, millijoules (Volta and later).
    pub energy_mj: Option<u64>,
    pub temp_c: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    /// The throttle-reason bitmask.
    pub throttle_reasons: Option<u64>,
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
    /// `Some(true)` when MIG mode is on now; `None` where MIG is unsupported.
    pub mig_enabled: Option<bool>,
    pub migs: Vec<MigReading>,
    /// Processes on the whole GPU (MIG processes are on their instance).
    pub processes: Vec<ProcessReading>,
}

impl GpuReading {
    /// Whether the GPU is split: then its leaf devices are its instances.
    pub fn is_split(&self) -> bool {
        self.mig_enabled == Some(true) && !self.migs.is_empty()
    }
}

/// A source of GPU readings.
pub trait GpuSource: Send {
    /// Every GPU of the node, now.
    fn read(&mut self) -> Result<Vec<GpuReading>, SourceError>;

    /// Health events seen since the last call (XIDs, ECC errors, MIG
    /// reconfiguration), never blocking.
    fn health(&mut self) -> Vec<HealthSignal> {
        Vec::new()
    }

    /// Failed calls so far, by NVML call name, for `/metrics`.
    fn errors(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::new()
    }
}

/// Something a device reported about its health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthSignal {
    pub device_uuid: String,
    pub kind: HealthKind,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HealthKind {
    /// An XID error with its code.
    Xid(u64),
    /// An uncorrectable (double-bit) ECC error.
    EccUncorrectable,
    /// The MIG layout changed: re-read inventory.
    MigReconfigured,
}

/// Why readings could not be taken at all.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// The NVML library did not load or initialise.
    #[error(
        "NVML could not be loaded from {library}: {reason} (is the NVIDIA driver installed? --nvml-lib PATH loads the library from elsewhere)"
    )]
    Load { library: String, reason: String },
    /// A call every reading needs failed.
    #[error("NVML call {call} failed: {reason}")]
    Call { call: &'static str, reason: String },
}

/// Slices of a whole GPU of this model (7 on A100/H100/H200/B200, 4 on A30).
pub fn max_slices_of(model: &str) -> u32 {
    if model.contains("A30") { 4 } else { 7 }
}

/// The MIG profile in a MIG device's name: `NVIDIA H200 MIG 1g.18gb` →
/// `1g.18gb`.
pub fn mig_profile(name: &str) -> Option<String> {
    let (_, profile) = name.rsplit_once("MIG ")?;
    let profile = profile.trim();
    (!profile.is_empty()).then(|| profile.to_owned())
}

/// Where the events come from.
#[derive(Debug, Clone)]
pub struct NodeContext {
    pub node: String,
    pub pool: String,
    pub cluster: String,
    /// `source` of the events, and the prefix of sample `event_id`s.
    pub source: String,
    pub interval_ms: i32,
}

impl NodeContext {
    /// The node `n1` of pool `h200` that unit tests report from.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        NodeContext {
            node: "n1".into(),
            pool: "h200".into(),
            cluster: "c".into(),
            source: "collector-n1".into(),
            interval_ms: 10_000,
        }
    }

    fn envelope(&self, event_id: String, at: Timestamp) -> Envelope {
        Envelope {
            event_id: event_id.into(),
            event_time: at,
            source: self.source.as_str().into(),
            cluster: self.cluster.as_str().into(),
        }
    }
}

fn saturating(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The node's leaf devices: a split GPU's instances, else the whole GPU.
pub fn inventory(ctx: &NodeContext, gpus: &[GpuReading], at: Timestamp) -> Event {
    let mut devices = Vec::new();
    for gpu in gpus {
        let max = max_slices_of(&gpu.name) as i32;
        if gpu.is_split() {
            for mig in &gpu.migs {
                devices.push(InventoryDevice {
                    device_uuid: mig.uuid.clone(),
                    parent_gpu_uuid: Some(gpu.uuid.clone()),
                    model: gpu.name.clone(),
                    slices: mig.slices as i32,
                    max_slices: max,
                    memory_bytes: saturating(mig.memory_total_bytes),
                    mig_profile: mig.profile.clone(),
                });
            }
        } else {
            devices.push(InventoryDevice {
                device_uuid: gpu.uuid.clone(),
                parent_gpu_uuid: None,
                model: gpu.name.clone(),
                slices: max,
                max_slices: max,
                memory_bytes: saturating(gpu.memory_total_bytes),
                mig_profile: None,
            });
        }
    }
    let id = format!("{}:inventory:{}", ctx.source, at.as_micros());
    Event::new(
        ctx.envelope(id, at),
        NodeInventory {
            pool: ctx.pool.clone(),
            node: ctx.node.clone(),
            devices,
        },
    )
}

/// The layout an inventory describes: which leaf devices exist, with their
/// slices. A change means a new `NodeInventory`.
pub fn layout(gpus: &[GpuReading]) -> Vec<(String, u32)> {
    let mut out: Vec<(String, u32)> = gpus
        .iter()
        .flat_map(|g| {
            if g.is_split() {
                g.migs.iter().map(|m| (m.uuid.clone(), m.slices)).collect()
            } else {
                vec![(g.uuid.clone(), max_slices_of(&g.name))]
            }
        })
        .collect();
    out.sort();
    out
}

/// Who each leaf device's processes work for, by device uuid: the first
/// process with a job; a device whose processes nobody can attribute is
/// held by an unknown job (job and tenant null). A device running no
/// process is absent: it is free.
pub type Holders = BTreeMap<String, Attribution>;

/// The holders of every leaf device in `gpus`, attributed once a round
/// for both the samples and the MIG assignments.
pub fn holders(gpus: &[GpuReading], attributor: Option<&Attributor>) -> Holders {
    let mut out = Holders::new();
    let mut note = |uuid: &str, processes: &[ProcessReading]| {
        if processes.is_empty() {
            return;
        }
        let holder = attributor
            .and_then(|a| {
                processes
                    .iter()
                    .map(|p| a.attribute(i64::from(p.pid)))
                    .find(|a| a.job_id.is_some())
            })
            .unwrap_or_default();
        out.insert(uuid.to_owned(), holder);
    };
    for gpu in gpus {
        if gpu.is_split() {
            for mig in &gpu.migs {
                note(&mig.uuid, &mig.processes);
            }
        } else {
            note(&gpu.uuid, &gpu.processes);
        }
    }
    out
}

/// A MIG device as an assignment names it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MigSlot {
    parent_gpu_uuid: String,
    mig_profile: String,
    slices: i32,
    max_slices: i32,
}

/// Who held each MIG device at the last look, to report changes as
/// `MigAssignment`s.
#[derive(Debug, Default)]
pub struct MigAssignments {
    held: BTreeMap<String, (MigSlot, Attribution)>,
}

impl MigAssignments {
    /// A `MigAssignment` for every change of holder since the last call:
    /// `released` for a holder that left (or whose device a
    /// reconfiguration removed), then `assigned` for one that came. The
    /// first call assigns every held MIG device.
    pub fn changes(
        &mut self,
        ctx: &NodeContext,
        gpus: &[GpuReading],
        holders: &Holders,
        at: Timestamp,
    ) -> Vec<Event> {
        let mut now = BTreeMap::new();
        for gpu in gpus.iter().filter(|g| g.is_split()) {
            for mig in &gpu.migs {
                let Some(holder) = holders.get(&mig.uuid) else {
                    continue;
                };
                let slot = MigSlot {
                    parent_gpu_uuid: gpu.uuid.clone(),
                    mig_profile: mig.profile.clone().unwrap_or_else(|| "unknown".to_owned()),
                    slices: mig.slices as i32,
                    max_slices: max_slices_of(&gpu.name) as i32,
                };
                now.insert(mig.uuid.clone(), (slot, holder.clone()));
            }
        }
        let event = |uuid: &str, (slot, holder): &(MigSlot, Attribution), action: MigAction| {
            let id = format!("{}:mig:{uuid}:{action}:{}", ctx.source, at.as_micros());
            Event::new(
                ctx.envelope(id, at),
                MigAssignment {
                    pool: ctx.pool.clone(),
                    node: ctx.node.clone(),
                    device_uuid: uuid.to_owned(),
                    parent_gpu_uuid: slot.parent_gpu_uuid.clone(),
                    mig_profile: slot.mig_profile.clone(),
                    slices: slot.slices,
                    max_slices: slot.max_slices,
                    action,
                    job_id: holder.job_id.clone(),
                    tenant: holder.tenant.clone(),
                },
            )
        };
        let mut out = Vec::new();
        for (uuid, was) in &self.held {
            if now.get(uuid) != Some(was) {
                out.push(event(uuid, was, MigAction::Released));
            }
        }
        for (uuid, is) in &now {
            if self.held.get(uuid) != Some(is) {
                out.push(event(uuid, is, MigAction::Assigned));
            }
        }
        self.held = now;
        out
    }
}

/// One `GpuSample` per leaf device; `seq` is advanced for each.
pub fn samples(
    ctx: &NodeContext,
    gpus: &[GpuReading],
    holders: &Holders,
    at: Timestamp,
    seq: &mut i64,
) -> Vec<Event> {
    let mut out = Vec::new();
    let mut push = |sample: GpuSample, seq: &mut i64| {
        *seq += 1;
        let id = format!("{}:{}", ctx.source, *seq);
        out.push(Event::new(
            ctx.envelope(id, at),
            GpuSample {
                seq: *seq,
                ..sample
            },
        ));
    };
    for gpu in gpus {
        let max = max_slices_of(&gpu.name) as i32;
        let energy = gpu.energy_mj.map(saturating);
        let temp = gpu.temp_c.map(|t| t as i32);
        if gpu.is_split() {
            for mig in &gpu.migs {
                let Attribution { job_id, tenant, .. } =
                    holders.get(&mig.uuid).cloned().unwrap_or_default();
                push(
                    GpuSample {
                        node: ctx.node.clone(),
                        pool: ctx.pool.clone(),
                        device_uuid: mig.uuid.clone(),
                        parent_gpu_uuid: Some(gpu.uuid.clone()),
                        model: gpu.name.clone(),
                        mig_profile: mig.profile.clone(),
                        slices: mig.slices as i32,
                        max_slices: max,
                        // NVML has no utilization for a MIG device; GPM's SM
                        // activity is the measure where it exists.
                        sm_util_pct: mig.sm_activity_pct.map(|v| v as f32),
                        mem_util_pct: None,
                        mem_used_bytes: saturating(mig.memory_used_bytes),
                        mem_total_bytes: saturating(mig.memory_total_bytes),
                        // Power is the whole GPU's; energy is the parent's
                        // counter, shared out by slices downstream.
                        power_mw: None,
                        energy_mj: energy,
                        temp_c: temp,
                        pids: mig.processes.iter().map(|p| i64::from(p.pid)).collect(),
                        job_id,
                        tenant,
                        interval_ms: ctx.interval_ms,
                        seq: 0,
                    },
                    seq,
                );
            }
        } else {
            let Attribution { job_id, tenant, .. } =
                holders.get(&gpu.uuid).cloned().unwrap_or_default();
            push(
                GpuSample {
                    node: ctx.node.clone(),
                    pool: ctx.pool.clone(),
                    device_uuid: gpu.uuid.clone(),
                    parent_gpu_uuid: None,
                    model: gpu.name.clone(),
                    mig_profile: None,
                    slices: max,
                    max_slices: max,
                    sm_util_pct: gpu.gpu_util_pct.map(|v| v as f32),
                    mem_util_pct: gpu.mem_util_pct.map(|v| v as f32),
                    mem_used_bytes: saturating(gpu.memory_used_bytes),
                    mem_total_bytes: saturating(gpu.memory_total_bytes),
                    power_mw: gpu.power_mw.map(i64::from),
                    energy_mj: energy,
                    temp_c: temp,
                    pids: gpu.processes.iter().map(|p| i64::from(p.pid)).collect(),
                    job_id,
                    tenant,
                    interval_ms: ctx.interval_ms,
                    seq: 0,
                },
                seq,
            );
        }
    }
    out
}

#[cfg(test)]
mod tests;
