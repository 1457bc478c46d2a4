//! Telemetry (topic `gpuledger.telemetry`, keyed by node).

record! {
    /// One reading of one device, covering [event_time − interval_ms,
    /// event_time). A value NVML does not support on the device is `None`,
    /// never 0. Its `event_id` is `source:seq`.
    pub struct GpuSample {
        pub node: String,
        pub pool: String,
        pub device_uuid: String,
        #[serde(default)]
        pub parent_gpu_uuid: Option<String>,
        pub model: String,
        #[serde(default)]
        pub mig_profile: Option<String>,
        pub slices: i32,
        pub max_slices: i32,
        /// SM activity in percent (utilization, or GPM SM activity on MIG).
        #[serde(default)]
        pub sm_util_pct: Option<f32>,
        #[serde(default)]
        pub mem_util_pct: Option<f32>,
        pub mem_used_bytes: i64,
        pub mem_total_bytes: i64,
        #[serde(default)]
        pub power_mw: Option<i64>,
        /// Cumulative energy counter of the parent GPU, millijoules.
        #[serde(default)]
        pub energy_mj: Option<i64>,
        #[serde(default)]
        pub temp_c: Option<i32>,
        pub pids: Vec<i64>,
        #[serde(default)]
        pub job_id: Option<String>,
        #[serde(default)]
        pub tenant: Option<String>,
        pub interval_ms: i32,
        /// Per collector, strictly increasing.
        pub seq: i64,
    }
}
