//! Command-line and environment settings of the collector. Precedence:
//! flag > environment (`GPULEDGER_…`) > default.

use clap::Args;
use gpuledger_common::kafka::KafkaArgs;
use gpuledger_schemas::Timestamp;

use crate::sim::FleetSpec;

/// Settings of the simulated fleet source.
#[derive(Debug, Clone, Args)]
pub struct SimulateArgs {
    #[command(flatten)]
    pub kafka: KafkaArgs,

    /// Cluster name carried by every event.
    #[arg(long, env = "GPULEDGER_CLUSTER", default_value = "local")]
    pub cluster: String,

    /// Pool the simulated GPUs belong to.
    #[arg(long, default_value = "h200")]
    pub pool: String,

    /// GPU model name, as NVML reports it.
    #[arg(long, default_value = "NVIDIA H200")]
    pub model: String,

    /// Number of nodes.
    #[arg(long, default_value_t = 2)]
    pub nodes: u32,

    /// GPUs per node.
    #[arg(long, default_value_t = 2)]
    pub gpus_per_node: u32,

    /// Split the first GPU of each node into MIG instances (3g+2g+1g+1g).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub mig: bool,

    /// Sample interval in simulated milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub interval_ms: i32,

    /// Simulated time of the first sample (RFC 3339); default: now.
    #[arg(long)]
    pub start: Option<Timestamp>,

    /// Rounds of samples to send; 0 runs until stopped.
    #[arg(long, default_value_t = 0)]
    pub ticks: u64,

    /// Sleep one interval between rounds (otherwise simulated time runs as
    /// fast as Kafka takes it).
    #[arg(long)]
    pub realtime: bool,

    /// Tenants whose jobs run on the fleet (comma-separated); none: the
    /// devices only report, nobody holds them. With tenants, jobs arrive on
    /// free devices, run for minutes to hours with idle stretches, and
    /// complete, fail (and are retried) or are cancelled; their admission
    /// requests and job events go to the ledger topic, and the samples of
    /// the devices they hold name them.
    #[arg(long, value_delimiter = ',')]
    pub tenants: Vec<String>,

    /// With tenants and `--realtime`: ask the processor's control API
    /// (`POST /v1/admission`) whether each job may start, as a scheduler
    /// would; a denied job does not start. While the API cannot be reached,
    /// requests go to the ledger directly and jobs start.
    #[arg(long, requires = "realtime")]
    pub api: Option<String>,

    /// The bearer token for `--api` (a scheduler's or admin's).
    #[arg(long, env = "GPULEDGER_API_TOKEN")]
    pub api_token: Option<String>,

    /// With tenants: XID faults per GPU per day (a GPU falls off the bus,
    /// its jobs fail, and it comes back one to four hours later).
    #[arg(long, default_value_t = 0.05)]
    pub xid_per_gpu_day: f64,

    /// Seed of the simulation; the same seed gives the same fleet and samples.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,

    /// Print a JSON summary of what was delivered to stdout at the end.
    #[arg(long)]
    pub summary: bool,
}

impl SimulateArgs {
    /// The fleet these settings describe.
    pub fn fleet_spec(&self) -> FleetSpec {
        FleetSpec {
            cluster: self.cluster.clone(),
            pool: self.pool.clone(),
            model: self.model.clone(),
            nodes: self.nodes,
            gpus_per_node: self.gpus_per_node,
            mig: self.mig,
            interval_ms: self.interval_ms,
            start: self.start.unwrap_or_else(Timestamp::now),
            seed: self.seed,
            tenants: self.tenants.clone(),
            xid_per_gpu_day: self.xid_per_gpu_day,
        }
    }
}
