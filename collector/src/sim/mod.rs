//! A simulated fleet: the same events a real node emits, from a seeded,
//! deterministic model instead of NVML. Drives demos, tests and benchmarks.
//!
//! With tenants, every leaf device (a whole GPU or a MIG instance) runs
//! their jobs one after another: a job arrives after a free spell of up to
//! an hour, holds the device for ten minutes to six hours (most are short,
//! a quarter are long), is busy at 60–98 % SM activity with idle stretches
//! now and then, and ends completed (80 %, with work units), failed (12 %,
//! retried up to twice on the same device) or cancelled (8 %). Each job
//! brings what a scheduler and its hooks would send: an `AdmissionRequest`
//! and `JobEvent`s `started` (naming the device) and the terminal one. A
//! device's samples name the job that holds it, with a process id.

mod jobs;
mod layout;

use std::collections::BTreeMap;

use gpuledger_schemas::events::{
    DeviceHealth, GpuSample, HealthState, InventoryDevice, JobState, NodeInventory,
};
use gpuledger_schemas::{Envelope, Event, Timestamp};

pub use jobs::{Admission, Admit, Unasked};
pub use layout::{FleetLayout, NodeLayout, TenantMix};

use jobs::{Jobs, SimJob};
use layout::{MAX_SLICES, gpu_memory, mig_profile};

/// The shape of the simulated fleet.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    pub cluster: String,
    /// The pool of nodes that do not name their own.
    pub pool: String,
    /// The nodes and their GPUs.
    pub layout: FleetLayout,
    pub interval_ms: i32,
    pub start: Timestamp,
    pub seed: u64,
    /// Tenants whose jobs run on nodes that do not name their own; none:
    /// nobody holds those nodes' devices.
    pub tenants: TenantMix,
    /// With tenants: XID faults per GPU per day.
    pub xid_per_gpu_day: f64,
}

impl FleetSpec {
    /// Ticks in `minutes` of simulated time (at least one).
    fn ticks(&self, minutes: i64) -> i64 {
        (minutes * 60_000 / i64::from(self.interval_ms).max(1)).max(1)
    }
}

/// One leaf device and its simulated state.
#[derive(Debug, Clone)]
struct SimDevice {
    inventory: InventoryDevice,
    /// Index of the parent GPU on its node, for the shared energy counter.
    gpu: usize,
    /// Utilization in percent; `None` where NVML reports none (MIG).
    util: Option<f32>,
    /// The job holding it, if any.
    job: Option<SimJob>,
    /// Ticks until the next job arrives while it is free.
    free_for: i64,
}

/// One simulated node: its devices and its own sample sequence.
#[derive(Debug, Clone)]
struct SimNode {
    name: String,
    pool: String,
    tenants: TenantMix,
    devices: Vec<SimDevice>,
    energy_mj: Vec<i64>,
    /// Per GPU: the tick it recovers at, while it is failed.
    failed_until: Vec<Option<i64>>,
    seq: i64,
}

/// The fleet's state, advanced one tick at a time.
#[derive(Debug)]
pub struct SimulatedFleet {
    spec: FleetSpec,
    nodes: Vec<SimNode>,
    rng: SplitMix64,
    tick: i64,
    /// Jobs started so far, for their ids.
    jobs: u64,
}

impl SimulatedFleet {
    /// Builds the fleet. UUIDs are derived from the seed, so the same spec
    /// always gives the same devices.
    pub fn new(spec: FleetSpec) -> Self {
        let mut rng = SplitMix64(spec.seed);
        let nodes = spec
            .layout
            .nodes
            .iter()
            .map(|node| {
                let mut devices = Vec::new();
                for (g, split) in node.gpus.iter().enumerate() {
                    let gpu_uuid = uuid_like("GPU", &mut rng);
                    if !split.is_empty() {
                        for profile in split {
                            let (slices, memory) = mig_profile(profile).unwrap_or((1, 1));
                            devices.push(SimDevice {
                                inventory: InventoryDevice {
                                    device_uuid: uuid_like("MIG", &mut rng),
                                    parent_gpu_uuid: Some(gpu_uuid.clone()),
                                    model: node.model.clone(),
                                    slices,
                                    max_slices: MAX_SLICES,
                                    memory_bytes: memory,
                                    mig_profile: Some(profile.clone()),
                                },
                                gpu: g,
                                util: None,
                                job: None,
                                free_for: 0,
                            });
                        }
                    } else {
                        devices.push(SimDevice {
                            inventory: InventoryDevice {
                                device_uuid: gpu_uuid,
                                parent_gpu_uuid: None,
                                model: node.model.clone(),
                                slices: MAX_SLICES,
                                max_slices: MAX_SLICES,
                                memory_bytes: gpu_memory(&node.model),
                                mig_profile: None,
                            },
                            gpu: g,
                            util: Some((rng.next() % 100) as f32),
                            job: None,
                            free_for: 0,
                        });
                    }
                }
                let energy_mj = (0..node.gpus.len())
                    .map(|_| (rng.next() % 1_000_000_000) as i64)
                    .collect();
                SimNode {
                    name: node.name.clone(),
                    pool: node.pool.clone().unwrap_or_else(|| spec.pool.clone()),
                    tenants: node.tenants.clone().unwrap_or_else(|| spec.tenants.clone()),
                    devices,
                    energy_mj,
                    failed_until: vec![None; node.gpus.len()],
                    seq: 0,
                }
            })
            .collect();
        Self {
            spec,
            nodes,
            rng,
            tick: 0,
            jobs: 0,
        }
    }

    /// The spec it was built from.
    pub fn spec(&self) -> &FleetSpec {
        &self.spec
    }

    /// Every node's `NodeInventory` at the start time.
    pub fn inventory(&self) -> Vec<Event> {
        self.nodes
            .iter()
            .map(|node| {
                Event::new(
                    envelope(
                        &self.spec,
                        &node.name,
                        format!("{}:inventory:0", node.name),
                        self.spec.start,
                    ),
                    NodeInventory {
                        pool: node.pool.clone(),
                        node: node.name.clone(),
                        devices: node.devices.iter().map(|d| d.inventory.clone()).collect(),
                    },
                )
            })
            .collect()
    }

    /// The time the next tick's samples carry.
    pub fn next_time(&self) -> Timestamp {
        self.spec
            .start
            .plus_micros((self.tick + 1) * i64::from(self.spec.interval_ms) * 1000)
    }

    /// Advances one interval and returns one `GpuSample` per device (and
    /// the jobs' ledger events, every request sent to the ledger).
    pub fn tick(&mut self) -> Vec<Event> {
        self.tick_with(&mut Unasked)
    }

    /// [`SimulatedFleet::tick`], asking `admit` whether each job may start.
    pub fn tick_with(&mut self, admit: &mut dyn Admit) -> Vec<Event> {
        let at = self.next_time();
        self.tick += 1;
        let interval_ms = self.spec.interval_ms;
        let mut out = Vec::new();
        let mut nodes = std::mem::take(&mut self.nodes);
        for node in &mut nodes {
            // Each GPU draws 150–700 W over the interval; its counter grows by that.
            let mut power_by_gpu = BTreeMap::new();
            for (g, energy) in node.energy_mj.iter_mut().enumerate() {
                let watts = 150 + (self.rng.next() % 550) as i64;
                *energy += watts * i64::from(interval_ms);
                power_by_gpu.insert(g, watts * 1000);
            }
            if !node.tenants.is_empty() {
                self.faults(node, at, &mut out);
            }
            for device in &mut node.devices {
                let failed = node.failed_until[device.gpu].is_some();
                if failed && device.job.is_none() {
                    // A GPU off the bus reports nothing.
                    continue;
                }
                if !failed {
                    node.seq += 1;
                }
                if node.tenants.is_empty() {
                    if let Some(util) = device.util.as_mut() {
                        let step = (self.rng.next() % 21) as f32 - 10.0;
                        *util = (*util + step).clamp(0.0, 100.0);
                    }
                } else {
                    let mut jobs = Jobs {
                        spec: &self.spec,
                        rng: &mut self.rng,
                        count: &mut self.jobs,
                        node: &node.name,
                        pool: &node.pool,
                        tenants: &node.tenants,
                        at,
                        out: &mut out,
                        admit: &mut *admit,
                    };
                    jobs.advance(device, failed);
                }
                if failed {
                    continue;
                }
                let inv = &device.inventory;
                let busy = match (&device.job, device.util) {
                    (None, _) if !node.tenants.is_empty() => 0.02,
                    (_, Some(u)) => u / 100.0,
                    (Some(job), None) if job.idle_for > 0 => 0.3,
                    (Some(_), None) => 0.8,
                    (None, None) => 0.5,
                };
                let mem_used = (inv.memory_bytes as f64 * f64::from(busy) * 0.9) as i64;
                let temp = 35 + (self.rng.next() % 40) as i32;
                out.push(Event::new(
                    envelope(
                        &self.spec,
                        &node.name,
                        format!("{}:{}", node.name, node.seq),
                        at,
                    ),
                    GpuSample {
                        node: node.name.clone(),
                        pool: node.pool.clone(),
                        device_uuid: inv.device_uuid.clone(),
                        parent_gpu_uuid: inv.parent_gpu_uuid.clone(),
                        model: inv.model.clone(),
                        mig_profile: inv.mig_profile.clone(),
                        slices: inv.slices,
                        max_slices: inv.max_slices,
                        sm_util_pct: device.util,
                        mem_util_pct: device.util.map(|u| (u * 0.8).round()),
                        mem_used_bytes: mem_used,
                        mem_total_bytes: inv.memory_bytes,
                        power_mw: inv
                            .parent_gpu_uuid
                            .is_none()
                            .then(|| power_by_gpu[&device.gpu]),
                        energy_mj: Some(node.energy_mj[device.gpu]),
                        temp_c: Some(temp),
                        pids: device.job.iter().map(|j| j.pid).collect(),
                        job_id: device.job.as_ref().map(|j| j.job_id.clone()),
                        tenant: device.job.as_ref().map(|j| j.tenant.clone()),
                        interval_ms,
                        seq: node.seq,
                    },
                ));
            }
        }
        self.nodes = nodes;
        out
    }
}

impl SimulatedFleet {
    /// XID faults and recoveries of `node`'s GPUs at this tick: a GPU that
    /// falls off the bus fails the jobs on it (not retried there) and is
    /// reported `failed`, then `healthy` one to four hours later.
    fn faults(&mut self, node: &mut SimNode, at: Timestamp, out: &mut Vec<Event>) {
        let chance = self.spec.xid_per_gpu_day * f64::from(self.spec.interval_ms) / 86_400_000.0;
        for g in 0..node.failed_until.len() {
            let Some(gpu_uuid) = node.devices.iter().find(|d| d.gpu == g).map(|d| {
                d.inventory
                    .parent_gpu_uuid
                    .clone()
                    .unwrap_or_else(|| d.inventory.device_uuid.clone())
            }) else {
                continue;
            };
            let health = |state: HealthState, xid: Option<i32>, reason: &str| {
                Event::new(
                    envelope(
                        &self.spec,
                        &node.name,
                        format!("{}:health:{gpu_uuid}:{}", node.name, at.as_micros()),
                        at,
                    ),
                    DeviceHealth {
                        pool: node.pool.clone(),
                        node: node.name.clone(),
                        device_uuid: gpu_uuid.clone(),
                        state,
                        xid,
                        reason: reason.to_owned(),
                    },
                )
            };
            match node.failed_until[g] {
                Some(until) if self.tick >= until => {
                    node.failed_until[g] = None;
                    out.push(health(HealthState::Healthy, None, "recovered"));
                }
                Some(_) => {}
                None => {
                    let roll = self.rng.next() as f64 / u64::MAX as f64;
                    if roll >= chance {
                        continue;
                    }
                    let hours = 1 + (self.rng.next() % 4) as i64;
                    node.failed_until[g] = Some(self.tick + self.spec.ticks(hours * 60));
                    out.push(health(
                        HealthState::Failed,
                        Some(79),
                        "XID 79: GPU has fallen off the bus",
                    ));
                    // Its jobs hang: their schedulers notice within
                    // five to fifteen minutes and fail them.
                    for device in node.devices.iter_mut().filter(|d| d.gpu == g) {
                        if let Some(job) = device.job.as_mut() {
                            let noticed = self.spec.ticks(5 + (self.rng.next() % 11) as i64);
                            job.ticks_left = job.ticks_left.min(noticed);
                            job.ending = JobState::Failed;
                            job.stranded = true;
                        }
                        device.free_for = 0;
                    }
                }
            }
        }
    }
}

/// The envelope of a simulated node's event.
fn envelope(spec: &FleetSpec, node: &str, event_id: String, at: Timestamp) -> Envelope {
    Envelope {
        event_id: event_id.into(),
        event_time: at,
        source: node.into(),
        cluster: spec.cluster.as_str().into(),
    }
}

/// A small, fast, seedable generator (SplitMix64): deterministic across
/// platforms, which is all a simulation needs.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn uuid_like(prefix: &str, rng: &mut SplitMix64) -> String {
    let a = rng.next();
    let b = rng.next();
    format!(
        "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests;
