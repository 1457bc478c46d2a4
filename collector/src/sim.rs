//! A simulated fleet: the same events a real node emits, from a seeded,
//! deterministic model instead of NVML. Drives demos, tests and benchmarks.

use std::collections::BTreeMap;

use gpuledger_schemas::events::{GpuSample, InventoryDevice, NodeInventory};
use gpuledger_schemas::{Envelope, Event, Timestamp};

/// The shape of the simulated fleet.
#[derive(Debug, Clone)]
pub struct FleetSpec {
    pub cluster: String,
    pub pool: String,
    pub model: String,
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// Split the first GPU of each node into MIG instances 3g+2g+1g+1g.
    pub mig: bool,
    pub interval_ms: i32,
    pub start: Timestamp,
    pub seed: u64,
}

/// One leaf device and its simulated state.
#[derive(Debug, Clone)]
struct SimDevice {
    inventory: InventoryDevice,
    /// Index of the parent GPU on its node, for the shared energy counter.
    gpu: usize,
    /// Utilization in percent; `None` where NVML reports none (MIG).
    util: Option<f32>,
}

/// One simulated node: its devices and its own sample sequence.
#[derive(Debug, Clone)]
struct SimNode {
    name: String,
    devices: Vec<SimDevice>,
    energy_mj: Vec<i64>,
    seq: i64,
}

/// The fleet's state, advanced one tick at a time.
#[derive(Debug)]
pub struct SimulatedFleet {
    spec: FleetSpec,
    nodes: Vec<SimNode>,
    rng: SplitMix64,
    tick: i64,
}

const H200_MEMORY: i64 = 141_000_000_000;
const MIG_LAYOUT: &[(&str, i32, i64)] = &[
    ("3g.71gb", 3, 71_000_000_000),
    ("2g.35gb", 2, 35_000_000_000),
    ("1g.18gb", 1, 18_000_000_000),
    ("1g.18gb", 1, 18_000_000_000),
];

impl SimulatedFleet {
    /// Builds the fleet. UUIDs are derived from the seed, so the same spec
    /// always gives the same devices.
    pub fn new(spec: FleetSpec) -> Self {
        let mut rng = SplitMix64(spec.seed);
        let nodes = (0..spec.nodes)
            .map(|n| {
                let name = format!("{}-n{:02}", spec.pool, n + 1);
                let mut devices = Vec::new();
                for g in 0..spec.gpus_per_node as usize {
                    let gpu_uuid = uuid_like("GPU", &mut rng);
                    if spec.mig && g == 0 {
                        for (profile, slices, memory) in MIG_LAYOUT {
                            devices.push(SimDevice {
                                inventory: InventoryDevice {
                                    device_uuid: uuid_like("MIG", &mut rng),
                                    parent_gpu_uuid: Some(gpu_uuid.clone()),
                                    model: spec.model.clone(),
                                    slices: *slices,
                                    max_slices: 7,
                                    memory_bytes: *memory,
                                    mig_profile: Some((*profile).to_owned()),
                                },
                                gpu: g,
                                util: None,
                            });
                        }
                    } else {
                        devices.push(SimDevice {
                            inventory: InventoryDevice {
                                device_uuid: gpu_uuid,
                                parent_gpu_uuid: None,
                                model: spec.model.clone(),
                                slices: 7,
                                max_slices: 7,
                                memory_bytes: H200_MEMORY,
                                mig_profile: None,
                            },
                            gpu: g,
                            util: Some((rng.next() % 100) as f32),
                        });
                    }
                }
                let energy_mj = (0..spec.gpus_per_node)
                    .map(|_| (rng.next() % 1_000_000_000) as i64)
                    .collect();
                SimNode {
                    name,
                    devices,
                    energy_mj,
                    seq: 0,
                }
            })
            .collect();
        Self {
            spec,
            nodes,
            rng,
            tick: 0,
        }
    }

    /// The spec it was built from.
    pub fn spec(&self) -> &FleetSpec {
        &self.spec
    }

    fn envelope(&self, event_id: String, at: Timestamp, node: &str) -> Envelope {
        Envelope {
            event_id,
            event_time: at,
            source: node.to_owned(),
            cluster: self.spec.cluster.clone(),
        }
    }

    /// Every node's `NodeInventory` at the start time.
    pub fn inventory(&self) -> Vec<Event> {
        self.nodes
            .iter()
            .map(|node| {
                Event::new(
                    self.envelope(
                        format!("{}:inventory:0", node.name),
                        self.spec.start,
                        &node.name,
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

    /// Advances one interval and returns one `GpuSample` per device.
    pub fn tick(&mut self) -> Vec<Event> {
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
            for device in &mut node.devices {
                node.seq += 1;
                if let Some(util) = device.util.as_mut() {
                    let step = (self.rng.next() % 21) as f32 - 10.0;
                    *util = (*util + step).clamp(0.0, 100.0);
                }
                let inv = &device.inventory;
                let busy = device.util.map_or(0.5, |u| u / 100.0);
                let mem_used = (inv.memory_bytes as f64 * f64::from(busy) * 0.9) as i64;
                let temp = 35 + (self.rng.next() % 40) as i32;
                let envelope = Envelope {
                    event_id: format!("{}:{}", node.name, node.seq),
                    event_time: at,
                    source: node.name.clone(),
                    cluster: self.spec.cluster.clone(),
                };
                out.push(Event::new(
                    envelope,
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
                        pids: Vec::new(),
                        job_id: None,
                        tenant: None,
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
            model: "NVIDIA H200".into(),
            nodes: 2,
            gpus_per_node: 2,
            mig: true,
            interval_ms: 10_000,
            start: "2026-11-01T00:00:00Z".parse().unwrap(),
            seed: 7,
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
