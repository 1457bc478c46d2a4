//! Command-line and environment settings of the collector. Precedence:
//! flag > environment (`GPULEDGER_…`) > default.

use clap::Args;
use gpuledger_common::kafka::KafkaArgs;
use gpuledger_schemas::Timestamp;

use crate::sim::{FleetLayout, FleetSpec, TenantMix};

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

    /// A JSON file of the fleet's nodes, instead of `--nodes`,
    /// `--gpus-per-node`, `--model` and `--mig`:
    /// `{"nodes":[{"name":"h100-n01","model":"NVIDIA H100 80GB HBM3","gpus":[["3g.40gb","2g.20gb"],[]]}]}`
    /// (each GPU a list of MIG profiles; empty: a whole GPU).
    #[arg(long, conflicts_with_all = ["nodes", "gpus_per_node", "model", "mig"])]
    pub fleet: Option<std::path::PathBuf>,

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

    /// Pace simulated time at this many times the wall clock (a round every
    /// interval ÷ speed); `--realtime` is `--speed 1`.
    #[arg(long, conflicts_with = "realtime")]
    pub speed: Option<f64>,

    /// Stop once simulated time passes this instant (RFC 3339).
    #[arg(long)]
    pub until: Option<Timestamp>,

    /// Tenants whose jobs run on the fleet (comma-separated, each `name` or
    /// `name:weight`; a fleet file's node may name its own); none: the
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

    /// Also write every ledger event (inventory, health, admission
    /// requests, job events; not samples) to this file as NDJSON, in the
    /// order they are sent: the ledger an offline recomputation folds.
    #[arg(long)]
    pub ledger_ndjson: Option<std::path::PathBuf>,

    /// Send nothing to Kafka (with `--ledger-ndjson`: only write the file).
    #[arg(long, conflicts_with_all = ["realtime", "speed", "api"])]
    pub dry_run: bool,
}

impl SimulateArgs {
    /// The fleet these settings describe; a fleet file that cannot be
    /// read or is wrong is an error naming it.
    pub fn fleet_spec(&self) -> Result<FleetSpec, String> {
        let layout = match &self.fleet {
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|text| FleetLayout::from_json(&text))
                .map_err(|e| format!("fleet file {}: {e}", path.display()))?,
            None => FleetLayout::uniform(
                &self.pool,
                &self.model,
                self.nodes,
                self.gpus_per_node,
                self.mig,
            ),
        };
        Ok(FleetSpec {
            cluster: self.cluster.clone(),
            pool: self.pool.clone(),
            layout,
            interval_ms: self.interval_ms,
            start: self.start.unwrap_or_else(Timestamp::now),
            seed: self.seed,
            tenants: TenantMix::parse(&self.tenants).map_err(|e| format!("--tenants: {e}"))?,
            xid_per_gpu_day: self.xid_per_gpu_day,
        })
    }

    /// Wall-clock pause between rounds, if paced.
    pub fn pause(&self) -> Option<std::time::Duration> {
        let speed = if self.realtime { Some(1.0) } else { self.speed }?;
        (speed > 0.0).then(|| {
            std::time::Duration::from_secs_f64(f64::from(self.interval_ms) / 1000.0 / speed)
        })
    }
}
