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

use std::collections::BTreeMap;

use gpuledger_schemas::events::{
    AdmissionRequest, DeviceHealth, GpuSample, HealthState, InventoryDevice, JobEvent, JobState,
    NodeInventory,
};
use gpuledger_schemas::{Envelope, Event, Timestamp};

/// The shape of the simulated fleet.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    pub cluster: String,
    pub pool: String,
    /// The nodes and their GPUs.
    pub layout: FleetLayout,
    pub interval_ms: i32,
    pub start: Timestamp,
    pub seed: u64,
    /// Tenants whose jobs run on the fleet; none: nobody holds a device.
    pub tenants: Vec<String>,
    /// With tenants: XID faults per GPU per day.
    pub xid_per_gpu_day: f64,
}

/// What became of a job's admission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Not asked anywhere: the request goes to the ledger with the job's
    /// events, and the job starts.
    Send,
    /// Asked and admitted (the one asked put the request in the ledger).
    Admitted,
    /// Asked and denied: the job does not start.
    Denied,
}

/// Who decides whether a simulated job may start, as a scheduler would ask.
pub trait Admit {
    fn admit(&mut self, request: &AdmissionRequest) -> Admission;
}

/// Nobody is asked: every request goes to the ledger and every job starts.
#[derive(Debug, Default)]
pub struct Unasked;

impl Admit for Unasked {
    fn admit(&mut self, _: &AdmissionRequest) -> Admission {
        Admission::Send
    }
}

/// A job holding one device.
#[derive(Debug, Clone)]
struct SimJob {
    tenant: String,
    job_id: String,
    attempt: i32,
    pid: i64,
    /// Ticks until it ends, and how.
    ticks_left: i64,
    ran: i64,
    ending: JobState,
    /// Ticks of the idle stretch it is in.
    idle_for: i64,
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

/// The fleet's hardware, node by node: what `--fleet FILE` holds, or what
/// `--nodes`, `--gpus-per-node`, `--model` and `--mig` describe.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetLayout {
    pub nodes: Vec<NodeLayout>,
}

/// One node: its name, GPU model and GPUs, each a list of MIG profiles
/// (`"3g.40gb"`; empty: a whole GPU).
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeLayout {
    pub name: String,
    pub model: String,
    pub gpus: Vec<Vec<String>>,
}

/// The compute slices of a Hopper GPU.
const MAX_SLICES: i32 = 7;

impl FleetLayout {
    /// `nodes` nodes of `gpus` GPUs of `model`, named `<pool>-nNN`; with
    /// `mig`, each node's first GPU split 3g+2g+1g+1g.
    pub fn uniform(pool: &str, model: &str, nodes: u32, gpus: u32, mig: bool) -> Self {
        let split = ["3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"]
            .map(str::to_owned)
            .to_vec();
        FleetLayout {
            nodes: (0..nodes)
                .map(|n| NodeLayout {
                    name: format!("{pool}-n{:02}", n + 1),
                    model: model.to_owned(),
                    gpus: (0..gpus)
                        .map(|g| {
                            if mig && g == 0 {
                                split.clone()
                            } else {
                                Vec::new()
                            }
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    /// Reads and checks a fleet file.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let layout: FleetLayout = serde_json::from_str(text).map_err(|e| e.to_string())?;
        layout.check()?;
        Ok(layout)
    }

    /// Every name once, every GPU a model NVML names, every split one the
    /// GPU can hold: profiles of 1, 2, 3, 4 or 7 slices adding up to at
    /// most 7.
    pub fn check(&self) -> Result<(), String> {
        let mut names = std::collections::BTreeSet::new();
        if self.nodes.is_empty() {
            return Err("the fleet has no nodes".to_owned());
        }
        for node in &self.nodes {
            if node.name.is_empty() || !names.insert(node.name.as_str()) {
                return Err(format!("node name {:?} is empty or repeated", node.name));
            }
            if node.model.is_empty() {
                return Err(format!("node {}: model is empty", node.name));
            }
            for (g, split) in node.gpus.iter().enumerate() {
                let mut slices = 0;
                for profile in split {
                    slices += mig_profile(profile)
                        .map_err(|e| format!("node {} GPU {g}: {e}", node.name))?
                        .0;
                }
                if slices > MAX_SLICES {
                    return Err(format!(
                        "node {} GPU {g}: {split:?} takes {slices} slices of {MAX_SLICES}",
                        node.name
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Slices and memory of a MIG profile name such as `3g.40gb`.
fn mig_profile(name: &str) -> Result<(i32, i64), String> {
    let bad = || format!("MIG profile {name:?} is not like 3g.40gb with 1, 2, 3, 4 or 7 slices");
    let (slices, memory) = name.split_once("g.").ok_or_else(bad)?;
    let slices: i32 = slices.parse().map_err(|_| bad())?;
    let gb: i64 = memory
        .strip_suffix("gb")
        .and_then(|m| m.parse().ok())
        .filter(|m| *m > 0)
        .ok_or_else(bad)?;
    if ![1, 2, 3, 4, 7].contains(&slices) {
        return Err(bad());
    }
    Ok((slices, gb * 1_000_000_000))
}

/// A whole GPU's memory by model: an H100 has 80 GB, others (H200) 141 GB.
fn gpu_memory(model: &str) -> i64 {
    if model.contains("H100") {
        80_000_000_000
    } else {
        141_000_000_000
    }
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
                        pool: self.spec.pool.clone(),
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
            if !self.spec.tenants.is_empty() {
                self.faults(node, at, &mut out);
            }
            for device in &mut node.devices {
                if node.failed_until[device.gpu].is_some() {
                    // A GPU off the bus reports nothing.
                    continue;
                }
                node.seq += 1;
                if self.spec.tenants.is_empty() {
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
                        at,
                        out: &mut out,
                        admit: &mut *admit,
                    };
                    jobs.advance(device);
                }
                let inv = &device.inventory;
                let busy = match (&device.job, device.util) {
                    (None, _) if !self.spec.tenants.is_empty() => 0.02,
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
                        pool: self.spec.pool.clone(),
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
        let ticks_per_hour = 3_600_000 / i64::from(self.spec.interval_ms).max(1);
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
                        pool: self.spec.pool.clone(),
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
                    node.failed_until[g] = Some(self.tick + hours * ticks_per_hour);
                    out.push(health(
                        HealthState::Failed,
                        Some(79),
                        "XID 79: GPU has fallen off the bus",
                    ));
                    for device in node.devices.iter_mut().filter(|d| d.gpu == g) {
                        if let Some(job) = device.job.take() {
                            out.push(job_event(
                                &self.spec,
                                &node.name,
                                at,
                                &device.inventory,
                                &job,
                                JobState::Failed,
                            ));
                        }
                        device.free_for = 0;
                    }
                }
            }
        }
    }
}

/// What one device's jobs do in one tick, and the ledger events they send.
struct Jobs<'a> {
    spec: &'a FleetSpec,
    rng: &'a mut SplitMix64,
    count: &'a mut u64,
    node: &'a str,
    at: Timestamp,
    out: &'a mut Vec<Event>,
    admit: &'a mut dyn Admit,
}

impl Jobs<'_> {
    fn below(&mut self, n: u64) -> u64 {
        self.rng.next() % n.max(1)
    }

    /// A job ends, starts or runs on; the device's utilization follows.
    fn advance(&mut self, device: &mut SimDevice) {
        let ticks_per_minute = (60_000 / i64::from(self.spec.interval_ms).max(1)).max(1);
        if let Some(job) = device.job.as_mut() {
            job.ticks_left -= 1;
            job.ran += 1;
            if job.ticks_left <= 0 {
                let job = device.job.take().unwrap_or_else(|| unreachable!());
                self.job_event(device, &job, job.ending);
                if job.ending == JobState::Failed && job.attempt < 3 {
                    // Retried at once on the same device.
                    self.start(device, Some(job), ticks_per_minute);
                    return;
                }
                device.free_for = self.below(60) as i64 * ticks_per_minute;
            }
        } else if device.free_for > 0 {
            device.free_for -= 1;
        } else {
            self.start(device, None, ticks_per_minute);
        }
        let idle_roll = self.below(100);
        let busy = 60.0 + self.below(39) as f32;
        match device.job.as_mut() {
            Some(job) => {
                if job.idle_for > 0 {
                    job.idle_for -= 1;
                } else if idle_roll < 2 {
                    job.idle_for = 1 + (idle_roll as i64 + 1) * 3 * ticks_per_minute;
                }
                if device.util.is_some() {
                    device.util = Some(if job.idle_for > 0 { 2.0 } else { busy });
                }
            }
            None => {
                if device.util.is_some() {
                    device.util = Some(0.0);
                }
            }
        }
    }

    /// A new job, or the next attempt of a failed one, takes the device.
    fn start(&mut self, device: &mut SimDevice, retry: Option<SimJob>, ticks_per_minute: i64) {
        if let Some(failed) = retry {
            // It idles a minute while it loads again, and runs as long as
            // the failed attempt did, and a minute more.
            let job = SimJob {
                attempt: failed.attempt + 1,
                ticks_left: failed.ran.max(1) + ticks_per_minute,
                ran: 0,
                ending: self.ending(),
                idle_for: ticks_per_minute,
                ..failed
            };
            self.begin(device, job);
            return;
        }
        *self.count += 1;
        let tenant = self.spec.tenants[self.below(self.spec.tenants.len() as u64) as usize].clone();
        let minutes = if self.below(4) == 0 {
            60 + self.below(300) as i64
        } else {
            10 + self.below(50) as i64
        };
        let job = SimJob {
            job_id: format!("{tenant}-{:05}", *self.count),
            tenant,
            attempt: 1,
            pid: 10_000 + (*self.count % 50_000) as i64,
            ticks_left: minutes * ticks_per_minute,
            ran: 0,
            ending: self.ending(),
            idle_for: 0,
        };
        self.begin(device, job);
    }

    fn ending(&mut self) -> JobState {
        match self.below(100) {
            0..80 => JobState::Completed,
            80..92 => JobState::Failed,
            _ => JobState::Cancelled,
        }
    }

    /// The job's admission request, and, unless it is denied, its start:
    /// the device is its. A denied job leaves the device free for a while.
    fn begin(&mut self, device: &mut SimDevice, job: SimJob) {
        let inv = &device.inventory;
        let request_id = format!("{}-{}", job.job_id, job.attempt);
        let request = AdmissionRequest {
            pool: self.spec.pool.clone(),
            request_id,
            job_id: job.job_id.clone(),
            attempt: job.attempt,
            tenant: job.tenant.clone(),
            slices: inv.slices,
            max_slices: inv.max_slices,
        };
        match self.admit.admit(&request) {
            Admission::Send => {
                let id = format!("admission-{}", request.request_id);
                let envelope = envelope(self.spec, self.node, id, self.at);
                self.out.push(Event::new(envelope, request));
            }
            Admission::Admitted => {}
            Admission::Denied => {
                let ticks_per_minute = (60_000 / i64::from(self.spec.interval_ms).max(1)).max(1);
                device.free_for = (5 + self.below(25) as i64) * ticks_per_minute;
                return;
            }
        }
        self.job_event(device, &job, JobState::Started);
        device.job = Some(job);
    }

    fn job_event(&mut self, device: &SimDevice, job: &SimJob, state: JobState) {
        let event = job_event(self.spec, self.node, self.at, &device.inventory, job, state);
        self.out.push(event);
    }
}

/// The envelope of a simulated node's event.
fn envelope(spec: &FleetSpec, node: &str, event_id: String, at: Timestamp) -> Envelope {
    Envelope {
        event_id,
        event_time: at,
        source: node.to_owned(),
        cluster: spec.cluster.clone(),
    }
}

/// A `JobEvent` of `job` on `device`: `started` names the device; a
/// completed attempt reports its work in `steps`.
fn job_event(
    spec: &FleetSpec,
    node: &str,
    at: Timestamp,
    device: &InventoryDevice,
    job: &SimJob,
    state: JobState,
) -> Event {
    let completed = state == JobState::Completed;
    Event::new(
        envelope(
            spec,
            node,
            format!("{}-{}-{state}", job.job_id, job.attempt),
            at,
        ),
        JobEvent {
            pool: spec.pool.clone(),
            job_id: job.job_id.clone(),
            attempt: job.attempt,
            tenant: job.tenant.clone(),
            user: None,
            node: Some(node.to_owned()),
            state,
            devices: (state == JobState::Started).then(|| vec![device.device_uuid.clone()]),
            requested_slices: None,
            requested_max_slices: None,
            work_units: completed.then(|| gpuledger_schemas::Decimal::from(job.ran * 10)),
            work_unit_name: completed.then(|| "steps".to_owned()),
            exit_code: match state {
                JobState::Completed => Some(0),
                JobState::Failed => Some(1),
                _ => None,
            },
            reason: None,
        },
    )
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
mod tests {
    use super::*;
    use gpuledger_schemas::EventBody;

    fn spec() -> FleetSpec {
        FleetSpec {
            cluster: "c1".into(),
            pool: "h200".into(),
            layout: FleetLayout::uniform("h200", "NVIDIA H200", 2, 2, true),
            interval_ms: 10_000,
            start: "2026-11-01T00:00:00Z".parse().unwrap(),
            seed: 7,
            tenants: Vec::new(),
            xid_per_gpu_day: 0.0,
        }
    }

    #[test]
    fn events_are_valid_and_deterministic() {
        let mut a = SimulatedFleet::new(spec());
        let mut b = SimulatedFleet::new(spec());
        assert_eq!(a.inventory(), b.inventory());
        for event in a.inventory() {
            event.validate().unwrap();
        }
        for _ in 0..5 {
            let (x, y) = (a.tick(), b.tick());
            assert_eq!(x, y);
            // 2 nodes × (4 MIG instances + 1 whole GPU)
            assert_eq!(x.len(), 10);
            for event in &x {
                event.validate().unwrap();
            }
        }
    }

    #[test]
    fn tenants_jobs_hold_devices_and_tell_the_ledger() {
        let spec = FleetSpec {
            tenants: vec!["team-llm".into(), "team-vision".into()],
            // Often enough that 5.5 hours of 4 GPUs see some.
            xid_per_gpu_day: 2.0,
            ..spec()
        };
        let run = |spec: &FleetSpec| {
            let mut fleet = SimulatedFleet::new(spec.clone());
            (0..2_000)
                .flat_map(|_| fleet.tick())
                .collect::<Vec<Event>>()
        };
        let events = run(&spec);
        assert_eq!(events, run(&spec), "the same seed gives the same events");
        // Per (job, attempt): its start, its end, and the device it named.
        let mut started: BTreeMap<(String, i32), String> = BTreeMap::new();
        let mut ended: BTreeMap<(String, i32), JobState> = BTreeMap::new();
        let mut admitted = 0;
        let mut held_samples = 0;
        // Per GPU: failed since (its samples stop until it recovers).
        let mut down: BTreeMap<String, Timestamp> = BTreeMap::new();
        let mut faults = 0;
        for event in &events {
            event.validate().unwrap();
            match &event.body {
                EventBody::AdmissionRequest(_) => admitted += 1,
                EventBody::JobEvent(j) if j.state == JobState::Started => {
                    let device = j.devices.clone().unwrap().remove(0);
                    assert!(
                        started
                            .insert((j.job_id.clone(), j.attempt), device)
                            .is_none()
                    );
                }
                EventBody::JobEvent(j) => {
                    let key = (j.job_id.clone(), j.attempt);
                    assert!(started.contains_key(&key), "{key:?} ended unstarted");
                    assert!(ended.insert(key, j.state).is_none());
                }
                EventBody::DeviceHealth(h) => {
                    if h.state == HealthState::Failed {
                        faults += 1;
                        assert!(
                            down.insert(h.device_uuid.clone(), event.envelope.event_time)
                                .is_none()
                        );
                    } else {
                        assert!(down.remove(&h.device_uuid).is_some(), "recovered unfailed");
                    }
                }
                EventBody::GpuSample(s) => {
                    let gpu = s.parent_gpu_uuid.as_ref().unwrap_or(&s.device_uuid);
                    assert!(!down.contains_key(gpu), "a failed GPU reported a sample");
                    // A held device names its job and a process; a free one neither.
                    assert_eq!(s.job_id.is_some(), !s.pids.is_empty());
                    assert_eq!(s.job_id.is_some(), s.tenant.is_some());
                    if let Some(job) = &s.job_id {
                        held_samples += 1;
                        let attempt = started
                            .iter()
                            .filter(|((j, _), d)| j == job && **d == s.device_uuid)
                            .map(|((_, a), _)| *a)
                            .max();
                        assert!(
                            attempt.is_some(),
                            "{job} on {} never started there",
                            s.device_uuid
                        );
                    }
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(admitted, started.len(), "one admission request per attempt");
        assert!(faults > 0, "no XID fault in 5.5 hours at 2 a day per GPU");
        assert!(held_samples > 0);
        // Over 2,000 ticks (5.5 hours) jobs end every way, and failures are
        // retried as later attempts of the same job.
        let states: std::collections::BTreeSet<JobState> = ended.values().copied().collect();
        assert!(states.contains(&JobState::Completed), "{states:?}");
        assert!(started.keys().any(|(_, attempt)| *attempt > 1));
        for ((job, attempt), _) in started.iter().filter(|((_, a), _)| *a > 1) {
            assert_eq!(
                ended.get(&(job.clone(), attempt - 1)),
                Some(&JobState::Failed)
            );
        }
    }

    /// Admits team-llm only.
    struct LlmOnly(Vec<String>);

    impl Admit for LlmOnly {
        fn admit(&mut self, request: &AdmissionRequest) -> Admission {
            self.0.push(request.request_id.clone());
            if request.tenant == "team-llm" {
                Admission::Admitted
            } else {
                Admission::Denied
            }
        }
    }

    #[test]
    fn a_denied_job_never_starts_and_an_admitted_one_sends_no_request() {
        let mut fleet = SimulatedFleet::new(FleetSpec {
            tenants: vec!["team-llm".into(), "team-vision".into()],
            ..spec()
        });
        let mut admit = LlmOnly(Vec::new());
        let events: Vec<Event> = (0..1_000)
            .flat_map(|_| fleet.tick_with(&mut admit))
            .collect();
        let starts: Vec<&JobEvent> = events
            .iter()
            .filter_map(|e| match &e.body {
                EventBody::JobEvent(j) if j.state == JobState::Started => Some(j),
                _ => None,
            })
            .collect();
        assert!(!starts.is_empty());
        assert!(starts.iter().all(|j| j.tenant == "team-llm"));
        assert!(admit.0.iter().any(|r| r.starts_with("team-vision")));
        assert!(
            !events
                .iter()
                .any(|e| matches!(e.body, EventBody::AdmissionRequest(_)))
        );
    }

    #[test]
    fn a_fleet_file_mixes_models_and_mig_layouts() {
        let layout = FleetLayout::from_json(
            r#"{"nodes":[
                {"name":"h100-n01","model":"NVIDIA H100 80GB HBM3","gpus":[["4g.40gb","3g.40gb"],[]]},
                {"name":"h200-n01","model":"NVIDIA H200","gpus":[["1g.18gb","1g.18gb","1g.18gb","1g.18gb","1g.18gb","1g.18gb","1g.18gb"],["7g.141gb"]]}
            ]}"#,
        )
        .unwrap();
        let fleet = SimulatedFleet::new(FleetSpec { layout, ..spec() });
        let devices: Vec<(String, Option<String>, i32, i64)> = fleet
            .inventory()
            .into_iter()
            .flat_map(|e| match e.body {
                EventBody::NodeInventory(n) => n.devices,
                _ => Vec::new(),
            })
            .map(|d| (d.model, d.mig_profile, d.slices, d.memory_bytes))
            .collect();
        assert_eq!(devices.len(), 2 + 1 + 7 + 1);
        assert_eq!(
            devices[..3],
            [
                (
                    "NVIDIA H100 80GB HBM3".into(),
                    Some("4g.40gb".into()),
                    4,
                    40_000_000_000
                ),
                (
                    "NVIDIA H100 80GB HBM3".into(),
                    Some("3g.40gb".into()),
                    3,
                    40_000_000_000
                ),
                ("NVIDIA H100 80GB HBM3".into(), None, 7, 80_000_000_000),
            ]
        );
        // Splits a Hopper GPU cannot hold, and malformed files, are refused
        // with what is wrong.
        for (file, wrong) in [
            (
                r#"{"nodes":[{"name":"a","model":"NVIDIA H200","gpus":[["4g.71gb","4g.71gb"]]}]}"#,
                "8 slices",
            ),
            (
                r#"{"nodes":[{"name":"a","model":"NVIDIA H200","gpus":[["5g.90gb"]]}]}"#,
                "5g.90gb",
            ),
            (
                r#"{"nodes":[{"name":"a","model":"NVIDIA H200","gpus":[]},{"name":"a","model":"NVIDIA H200","gpus":[]}]}"#,
                "repeated",
            ),
            (
                r#"{"nodes":[{"name":"a","model":"NVIDIA H200","gpu":[]}]}"#,
                "unknown field",
            ),
            (r#"{"nodes":[]}"#, "no nodes"),
        ] {
            let e = FleetLayout::from_json(file).unwrap_err();
            assert!(e.contains(wrong), "{file}: {e}");
        }
    }

    #[test]
    fn mig_devices_report_no_utilization_and_share_the_parent_counter() {
        let mut fleet = SimulatedFleet::new(spec());
        let samples: Vec<GpuSample> = fleet
            .tick()
            .into_iter()
            .filter_map(|e| match e.body {
                EventBody::GpuSample(s) => Some(s),
                _ => None,
            })
            .collect();
        let mig: Vec<&GpuSample> = samples.iter().filter(|s| s.mig_profile.is_some()).collect();
        assert_eq!(mig.iter().map(|s| s.slices).sum::<i32>(), 14);
        assert!(
            mig.iter()
                .all(|s| s.sm_util_pct.is_none() && s.power_mw.is_none())
        );
        assert_eq!(mig[0].energy_mj, mig[1].energy_mj);
        assert!(
            samples
                .iter()
                .filter(|s| s.mig_profile.is_none())
                .all(|s| s.sm_util_pct.is_some())
        );
    }
}
