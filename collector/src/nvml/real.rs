//! Readings from the NVIDIA driver through `nvml-wrapper` 0.13.
//!
//! The library is loaded at run time (`--nvml-lib`, default
//! `libnvidia-ml.so.1`), so the collector builds and starts on machines
//! without a driver and says clearly why it cannot read one. Calls a device
//! does not support give `None`; other failures also give `None` and are
//! counted by call name. MIG devices are found by walking
//! `mig_device_by_index` up to `mig_device_count` — the maximum, not the
//! number present — skipping empty slots. XID and ECC events are waited for
//! on a background thread and handed over as [`HealthSignal`]s.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::enums::gpm::GpmMetricId;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::{Device, GpmSample, Nvml};

use super::{
    GpuReading, GpuSource, HealthKind, HealthSignal, MigReading, ProcessReading, SourceError, ids,
    mig_profile,
};

/// The library loaded when `--nvml-lib` is not given.
pub const DEFAULT_LIBRARY: &str = "libnvidia-ml.so.1";

type ErrorCounts = Arc<Mutex<BTreeMap<&'static str, u64>>>;

/// NVML through `nvml-wrapper`.
pub struct RealNvml {
    /// Devices, event sets and GPM samples borrow the `Nvml`; the collector
    /// keeps it for its whole life, so it is leaked once at start.
    nvml: &'static Nvml,
    errors: ErrorCounts,
    health: mpsc::Receiver<HealthSignal>,
    /// The previous GPM sample per (GPU index, GPU-instance id): SM activity
    /// is the difference of two samples.
    gpm: BTreeMap<(u32, u32), GpmSample<'static>>,
}

impl std::fmt::Debug for RealNvml {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RealNvml").finish_non_exhaustive()
    }
}

impl RealNvml {
    /// Loads NVML from `library` (the default name when `None`) and starts
    /// the health-event thread.
    pub fn open(library: Option<&str>) -> Result<Self, SourceError> {
        let name = library.unwrap_or(DEFAULT_LIBRARY);
        let nvml = Nvml::builder()
            .lib_path(OsStr::new(name))
            .init()
            .map_err(|e| SourceError::Load {
                library: name.to_owned(),
                reason: e.to_string(),
            })?;
        let nvml: &'static Nvml = Box::leak(Box::new(nvml));
        let errors = ErrorCounts::default();
        let (tx, health) = mpsc::channel();
        let thread_errors = errors.clone();
        std::thread::Builder::new()
            .name("nvml-events".into())
            .spawn(move || watch_events(nvml, &tx, &thread_errors))
            .map_err(|e| SourceError::Call {
                call: "spawn event thread",
                reason: e.to_string(),
            })?;
        Ok(Self {
            nvml,
            errors,
            health,
            gpm: BTreeMap::new(),
        })
    }

    /// The value of a call that may be unsupported: `None` then, and also
    /// `None` (counted) on any other failure.
    fn optional<T>(&self, call: &'static str, result: Result<T, NvmlError>) -> Option<T> {
        optional(&self.errors, call, result)
    }

    fn processes(&self, device: &Device<'_>) -> Vec<ProcessReading> {
        self.optional(
            "running_compute_processes",
            device.running_compute_processes(),
        )
        .unwrap_or_default()
        .iter()
        .map(process)
        .collect()
    }

    fn read_gpu(&mut self, index: u32) -> Result<GpuReading, SourceError> {
        let nvml = self.nvml;
        let call = |call: &'static str| {
            move |e: NvmlError| SourceError::Call {
                call,
                reason: e.to_string(),
            }
        };
        let device = nvml
            .device_by_index(index)
            .map_err(call("device_by_index"))?;
        let uuid = device.uuid().map_err(call("uuid"))?;
        let name = device.name().map_err(call("name"))?;
        let memory = device.memory_info().map_err(call("memory_info"))?;
        let utilization = self.optional("utilization_rates", device.utilization_rates());
        let mig_enabled = self
            .optional("mig_mode", device.mig_mode())
            .map(|m| m.current == 1);
        let migs = if mig_enabled == Some(true) {
            self.read_migs(index, &device)
        } else {
            Vec::new()
        };
        Ok(GpuReading {
            index,
            uuid,
            name,
            memory_total_bytes: memory.total,
            memory_used_bytes: memory.used,
            gpu_util_pct: utilization.as_ref().map(|u| u.gpu),
            mem_util_pct: utilization.as_ref().map(|u| u.memory),
            power_mw: self.optional("power_usage", device.power_usage()),
            energy_mj: self.optional(
                "total_energy_consumption",
                device.total_energy_consumption(),
            ),
            temp_c: self.optional("temperature", device.temperature(TemperatureSensor::Gpu)),
            sm_clock_mhz: self.optional("clock_info", device.clock_info(Clock::SM)),
            throttle_reasons: self
                .optional(
                    "current_throttle_reasons",
                    device.current_throttle_reasons(),
                )
                .map(|r| r.bits()),
            ecc_corrected: self.optional(
                "total_ecc_errors",
                device.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile),
            ),
            ecc_uncorrected: self.optional(
                "total_ecc_errors",
                device.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
            ),
            mig_enabled,
            processes: if migs.is_empty() {
                self.processes(&device)
            } else {
                Vec::new()
            },
            migs,
        })
    }

    /// Every MIG device of a MIG-enabled GPU.
    fn read_migs(&mut self, gpu_index: u32, parent: &Device<'static>) -> Vec<MigReading> {
        let slots = self
            .optional("mig_device_count", parent.mig_device_count())
            .unwrap_or(0);
        let gpm = self
            .optional("gpm_support", parent.gpm_support())
            .unwrap_or(false);
        let mut out = Vec::new();
        for slot in 0..slots {
            let device = match parent.mig_device_by_index(slot) {
                Ok(device) => device,
                // An empty slot.
                Err(NvmlError::NotFound | NvmlError::InvalidArg) => continue,
                Err(e) => {
                    count(&self.errors, "mig_device_by_index", &e);
                    continue;
                }
            };
            let Some(uuid) = self.optional("mig uuid", device.uuid()) else {
                continue;
            };
            let name = self.optional("mig name", device.name()).unwrap_or_default();
            let memory = self.optional("mig memory_info", device.memory_info());
            let slices = self
                .optional("mig attributes", device.attributes())
                .map(|a| a.gpu_instance_slice_count);
            let gpu_instance_id = self.optional(
                "nvmlDeviceGetGpuInstanceId",
                ids::gpu_instance_id(self.nvml, &device),
            );
            let sm_activity_pct = match (gpm, gpu_instance_id) {
                (true, Some(gi)) => self.gpm_sm_activity(parent, gpu_index, gi),
                _ => None,
            };
            out.push(MigReading {
                profile: mig_profile(&name),
                slices: slices.unwrap_or(0),
                gpu_instance_id,
                memory_total_bytes: memory.as_ref().map_or(0, |m| m.total),
                memory_used_bytes: memory.as_ref().map_or(0, |m| m.used),
                sm_activity_pct,
                processes: self.processes(&device),
                uuid,
            });
        }
        out
    }

    /// SM activity of one GPU instance since the previous call, from GPM
    /// samples taken on the parent (`None` on the first call).
    fn gpm_sm_activity(&mut self, parent: &Device<'static>, gpu: u32, gi: u32) -> Option<f64> {
        let sample = self.optional("gpm_mig_sample", parent.gpm_mig_sample(gi))?;
        let previous = self.gpm.insert((gpu, gi), sample)?;
        let current = self.gpm.get(&(gpu, gi))?;
        let results = self.optional(
            "gpm_metrics_get",
            nvml_wrapper::gpm::gpm_metrics_get(
                self.nvml,
                &previous,
                current,
                &[GpmMetricId::SmUtil],
            ),
        )?;
        let first = results.into_iter().next()?;
        self.optional("gpm SmUtil", first).map(|r| r.value)
    }
}

fn process(p: &ProcessInfo) -> ProcessReading {
    ProcessReading {
        pid: p.pid,
        used_memory_bytes: match p.used_gpu_memory {
            UsedGpuMemory::Used(bytes) => Some(bytes),
            UsedGpuMemory::Unavailable => None,
        },
        gpu_instance_id: p.gpu_instance_id,
        compute_instance_id: p.compute_instance_id,
    }
}

fn count(errors: &ErrorCounts, call: &'static str, error: &NvmlError) {
    tracing::debug!(call, %error, "NVML call failed");
    if let Ok(mut map) = errors.lock() {
        *map.entry(call).or_default() += 1;
    }
}

fn optional<T>(
    errors: &ErrorCounts,
    call: &'static str,
    result: Result<T, NvmlError>,
) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(NvmlError::NotSupported) => None,
        Err(e) => {
            count(errors, call, &e);
            None
        }
    }
}

impl GpuSource for RealNvml {
    fn read(&mut self) -> Result<Vec<GpuReading>, SourceError> {
        let count = self.nvml.device_count().map_err(|e| SourceError::Call {
            call: "device_count",
            reason: e.to_string(),
        })?;
        (0..count).map(|index| self.read_gpu(index)).collect()
    }

    fn health(&mut self) -> Vec<HealthSignal> {
        self.health.try_iter().collect()
    }

    fn errors(&self) -> BTreeMap<&'static str, u64> {
        self.errors.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// Registers every GPU for XID, ECC and MIG-change events and forwards
/// them until the receiver goes away. Events are registered on the parent
/// GPUs: NVML reports none per MIG handle.
fn watch_events(nvml: &'static Nvml, tx: &mpsc::Sender<HealthSignal>, errors: &ErrorCounts) {
    let wanted = EventTypes::CRITICAL_XID_ERROR
        | EventTypes::DOUBLE_BIT_ECC_ERROR
        | EventTypes::MIG_CONFIG_CHANGE;
    let Some(mut set) = optional(errors, "create_event_set", nvml.create_event_set()) else {
        return;
    };
    let devices = optional(errors, "device_count", nvml.device_count()).unwrap_or(0);
    for index in 0..devices {
        let Some(device) = optional(errors, "device_by_index", nvml.device_by_index(index)) else {
            continue;
        };
        let supported = optional(
            errors,
            "supported_event_types",
            device.supported_event_types(),
        )
        .unwrap_or(EventTypes::empty());
        match device.register_events(wanted & supported, set) {
            Ok(registered) => set = registered,
            Err(e) => {
                count(errors, "register_events", &e.error);
                let Some(fresh) = optional(errors, "create_event_set", nvml.create_event_set())
                else {
                    return;
                };
                set = fresh;
            }
        }
    }
    loop {
        match set.wait(1_000) {
            Ok(event) => {
                let Ok(uuid) = event.device.uuid() else {
                    continue;
                };
                let kind = if event.event_type.contains(EventTypes::CRITICAL_XID_ERROR) {
                    HealthKind::Xid(match event.event_data {
                        Some(XidError::Value(code)) => code,
                        _ => 999,
                    })
                } else if event.event_type.contains(EventTypes::DOUBLE_BIT_ECC_ERROR) {
                    HealthKind::EccUncorrectable
                } else {
                    HealthKind::MigReconfigured
                };
                if tx
                    .send(HealthSignal {
                        device_uuid: uuid,
                        kind,
                    })
                    .is_err()
                {
                    return;
                }
            }
            Err(NvmlError::Timeout) => {}
            Err(e) => {
                count(errors, "event_set wait", &e);
                std::thread::sleep(std::time::Duration::from_secs(1));
            }
        }
    }
}
