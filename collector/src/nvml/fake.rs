//! A stand-in for NVML: fixed readings that move a little on every read
//! (energy counters grow), for tests and for measuring the collector
//! without a GPU.

use std::collections::VecDeque;

use super::{GpuReading, GpuSource, HealthSignal, MigReading, ProcessReading, SourceError};

/// Replays readings.
#[derive(Debug, Clone, Default)]
pub struct FakeNvml {
    pub gpus: Vec<GpuReading>,
    pub health: VecDeque<HealthSignal>,
    /// Reads so far.
    pub reads: u64,
}

impl FakeNvml {
    /// `gpus` H200s; with `migs` > 0 each is split into `migs` 1g instances
    /// (at most 7), each running one process.
    pub fn fleet(gpus: u32, migs: u32) -> Self {
        let gpus = (0..gpus)
            .map(|g| {
                let uuid = format!("GPU-fake-{g:04}");
                let migs: Vec<MigReading> = (0..migs.min(7))
                    .map(|m| MigReading {
                        uuid: format!("MIG-fake-{g:04}-{m}"),
                        profile: Some("1g.18gb".into()),
                        slices: 1,
                        gpu_instance_id: Some(m + 7),
                        memory_total_bytes: 18_000_000_000,
                        memory_used_bytes: 4_000_000_000,
                        sm_activity_pct: Some(f64::from(10 * m)),
                        processes: vec![ProcessReading {
                            pid: 10_000 + g * 10 + m,
                            used_memory_bytes: Some(4_000_000_000),
                            gpu_instance_id: Some(m + 7),
                            compute_instance_id: Some(0),
                        }],
                    })
                    .collect();
                GpuReading {
                    index: g,
                    uuid,
                    name: "NVIDIA H200".into(),
                    memory_total_bytes: 141_000_000_000,
                    memory_used_bytes: 30_000_000_000,
                    gpu_util_pct: migs.is_empty().then_some(55),
                    mem_util_pct: migs.is_empty().then_some(40),
                    power_mw: Some(400_000),
                    energy_mj: Some(1_000_000),
                    temp_c: Some(51),
                    sm_clock_mhz: Some(1_980),
                    throttle_reasons: Some(0),
                    ecc_corrected: Some(0),
                    ecc_uncorrected: Some(0),
                    mig_enabled: Some(!migs.is_empty()),
                    migs,
                    processes: Vec::new(),
                }
            })
            .collect();
        Self {
            gpus,
            ..Self::default()
        }
    }
}

impl GpuSource for FakeNvml {
    fn read(&mut self) -> Result<Vec<GpuReading>, SourceError> {
        self.reads += 1;
        for gpu in &mut self.gpus {
            // 400 W for a second.
            gpu.energy_mj = gpu.energy_mj.map(|e| e + 400_000);
        }
        Ok(self.gpus.clone())
    }

    fn health(&mut self) -> Vec<HealthSignal> {
        self.health.drain(..).collect()
    }
}
