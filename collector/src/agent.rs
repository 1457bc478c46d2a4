//! The node agent's loop: read the GPUs, attribute their processes, and
//! deliver `NodeInventory` (at start and whenever the layout changes),
//! `DeviceHealth` (XID and ECC events), `MigAssignment` (whenever a MIG
//! device's holder changes) and a `GpuSample` per device every interval;
//! and the job events posted to its endpoint (`jobs_api`).
//!
//! `seq` starts at the wall clock in microseconds and counts up by one per
//! sample, so it stays strictly increasing across restarts without keeping
//! state (a node samples far fewer than a million devices a second).

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use gpuledger_common::kafka::{self, EventProducer, KafkaArgs};
use gpuledger_common::shutdown::Shutdown;
use gpuledger_schemas::{Event, Timestamp};

use crate::attribution::{Attributor, PodDirectory, PodLogs, TenantMap};
use crate::jobs_api::{self, JobsToken, Origin, Submission};
use crate::metrics;
use crate::nvml::fake::FakeNvml;
use crate::nvml::real::RealNvml;
use crate::nvml::xid::health_event;
use crate::nvml::{
    GpuSource, MigAssignments, NodeContext, SourceError, holders, inventory, layout, samples,
};
use crate::pods::PodJobs;
use crate::spool::Spool;

/// Where readings come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SourceKind {
    /// The NVIDIA driver, through NVML.
    Nvml,
    /// A fake NVML (`--fake-gpus`, `--fake-migs`), for measuring the agent
    /// without a GPU.
    Fake,
}

/// What `--output` writes for `--once`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// One event per line in the JSON form.
    Json,
}

/// Settings of the node agent.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub kafka: KafkaArgs,

    /// Where readings come from.
    #[arg(long, value_enum, default_value = "nvml")]
    pub source: SourceKind,

    /// The NVML library to load (default `libnvidia-ml.so.1`).
    #[arg(long, env = "GPULEDGER_NVML_LIB")]
    pub nvml_lib: Option<String>,

    /// Node name on the events (default: the host name).
    #[arg(long, env = "GPULEDGER_NODE")]
    pub node: Option<String>,

    /// Pool of this node's GPUs.
    #[arg(long, env = "GPULEDGER_POOL", default_value = "default")]
    pub pool: String,

    /// Cluster name carried by every event.
    #[arg(long, env = "GPULEDGER_CLUSTER", default_value = "local")]
    pub cluster: String,

    /// Sample interval, milliseconds (1,000 to 60,000).
    #[arg(long, env = "GPULEDGER_INTERVAL_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(i32).range(1_000..=60_000))]
    pub interval_ms: i32,

    /// Where `/proc` is (a host mount inside a container).
    #[arg(long, env = "GPULEDGER_PROC_ROOT", default_value = "/proc")]
    pub proc_root: PathBuf,

    /// JSON file mapping Kubernetes namespaces, Slurm accounts and users to
    /// tenants: `{"namespaces":{…},"slurm_accounts":{…},"users":{…}}`.
    #[arg(long, env = "GPULEDGER_TENANT_MAP")]
    pub tenant_map: Option<PathBuf>,

    /// The kubelet's pod log folders (`/var/log/pods` on the node): they
    /// name each pod's namespace and name, so pods are named and mapped to
    /// tenants as the admission webhook does.
    #[arg(long, env = "GPULEDGER_POD_LOGS")]
    pub pod_logs: Option<PathBuf>,

    /// Report the lifecycle of Kubernetes pods no scheduler reports, from
    /// what the node sees: `started` when a pod is first seen on a GPU,
    /// `completed` once it has been on none for three rounds (see
    /// `docs/collector.md`).
    #[arg(long, env = "GPULEDGER_OBSERVE_PODS")]
    pub observe_pods: bool,

    /// Read once, print the events and exit, sending nothing.
    #[arg(long)]
    pub once: bool,

    /// Format of `--once`'s events.
    #[arg(long, value_enum, default_value = "json")]
    pub output: Output,

    /// GPUs of the fake source.
    #[arg(long, default_value_t = 8)]
    pub fake_gpus: u32,

    /// MIG instances per GPU of the fake source (0: whole GPUs).
    #[arg(long, default_value_t = 7)]
    pub fake_migs: u32,

    /// Stop after this many rounds (0: run until stopped).
    #[arg(long, default_value_t = 0)]
    pub rounds: u64,

    /// Where events wait until the broker acknowledged them.
    #[arg(long, env = "GPULEDGER_SPOOL_DIR", default_value = "var/spool")]
    pub spool_dir: PathBuf,

    /// Bound of the spool (MiB); past it the oldest waiting events are
    /// dropped, counted and logged.
    #[arg(long, env = "GPULEDGER_SPOOL_MAX_MB", default_value_t = 512)]
    pub spool_max_mb: u64,

    /// Address of `/metrics` and `/healthz`; port 0 picks a free one.
    #[arg(
        long,
        env = "GPULEDGER_COLLECTOR_LISTEN",
        default_value = "127.0.0.1:9400"
    )]
    pub listen: std::net::SocketAddr,

    /// Address of the job endpoint (`/v1/jobs/start|end`) for this node's
    /// hooks and job wrappers, or `off`. Anywhere but a loopback address it
    /// needs `--jobs-token`.
    #[arg(
        long,
        env = "GPULEDGER_COLLECTOR_JOBS_LISTEN",
        default_value = "127.0.0.1:9401"
    )]
    pub jobs_listen: JobsListen,

    /// The bearer token the job endpoint requires (required when it is
    /// bound to a non-loopback address).
    #[arg(long, env = "GPULEDGER_COLLECTOR_JOBS_TOKEN", hide_env_values = true)]
    pub jobs_token: Option<JobsToken>,
}

/// `--jobs-listen`: an address, or `off`.
#[derive(Debug, Clone, Copy)]
pub struct JobsListen(pub Option<std::net::SocketAddr>);

impl std::str::FromStr for JobsListen {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "off" {
            return Ok(JobsListen(None));
        }
        s.parse()
            .map(|a| JobsListen(Some(a)))
            .map_err(|e| format!("{s:?} is neither an address (127.0.0.1:9401) nor `off`: {e}"))
    }
}

/// Events handed to librdkafka at most at once; the rest wait in the spool.
const IN_FLIGHT: usize = 10_000;

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// NVML is not there: the exit code says so apart from other failures.
    #[error(transparent)]
    NoNvml(SourceError),
    /// Readings failed.
    #[error(transparent)]
    Source(SourceError),
    /// Settings that do not work.
    #[error("{0}")]
    Config(String),
    /// Delivery failed.
    #[error(transparent)]
    Delivery(#[from] crate::Error),
    /// The spool could not be read or written.
    #[error("{0}")]
    Spool(String),
}

impl AgentError {
    /// The process exit code: 3 when NVML could not be loaded, 2 for bad
    /// settings, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            AgentError::NoNvml(_) => 3,
            AgentError::Config(_) => 2,
            _ => 1,
        }
    }
}

fn open_source(args: &RunArgs) -> Result<Box<dyn GpuSource>, AgentError> {
    match args.source {
        SourceKind::Nvml => match RealNvml::open(args.nvml_lib.as_deref()) {
            Ok(nvml) => Ok(Box::new(nvml)),
            Err(e @ SourceError::Load { .. }) => Err(AgentError::NoNvml(e)),
            Err(e) => Err(AgentError::Source(e)),
        },
        SourceKind::Fake => Ok(Box::new(FakeNvml::fleet(args.fake_gpus, args.fake_migs))),
    }
}

fn attributor(args: &RunArgs) -> Result<Attributor, AgentError> {
    let map = match &args.tenant_map {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| AgentError::Config(format!("tenant map {}: {e}", path.display())))?;
            serde_json::from_str::<TenantMap>(&text)
                .map_err(|e| AgentError::Config(format!("tenant map {}: {e}", path.display())))?
        }
        None => TenantMap::default(),
    };
    let pods = args
        .pod_logs
        .as_ref()
        .map(|dir| Box::new(PodLogs::new(dir)) as Box<dyn PodDirectory>);
    Ok(Attributor::new(&args.proc_root, map, pods))
}

fn node_name(args: &RunArgs) -> String {
    args.node.clone().unwrap_or_else(|| {
        std::fs::read_to_string("/etc/hostname")
            .map(|h| h.trim().to_owned())
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(|| "localhost".to_owned())
    })
}

/// One round: health events, inventory when the layout changed, MIG
/// holders that changed, pods started or gone (if observed), samples.
struct Round<'a> {
    ctx: &'a NodeContext,
    attributor: &'a Attributor,
    last_layout: Option<Vec<(String, u32)>>,
    migs: MigAssignments,
    /// Pods whose lifecycle the node reports itself (`--observe-pods`).
    pods: Option<PodJobs>,
    seq: i64,
}

impl Round<'_> {
    fn events(&mut self, source: &mut dyn GpuSource) -> Result<Vec<Event>, AgentError> {
        let at = Timestamp::now();
        let gpus = source.read().map_err(AgentError::Source)?;
        let mut out: Vec<Event> = source
            .health()
            .iter()
            .filter_map(|signal| health_event(self.ctx, signal, at))
            .collect();
        let now_layout = layout(&gpus);
        if self.last_layout.as_ref() != Some(&now_layout) {
            out.push(inventory(self.ctx, &gpus, at));
            self.last_layout = Some(now_layout);
        }
        let holders = holders(&gpus, Some(self.attributor));
        out.extend(self.migs.changes(self.ctx, &gpus, &holders, at));
        if let Some(pods) = &mut self.pods {
            out.extend(pods.observe(self.ctx, &holders, at));
        }
        out.extend(samples(self.ctx, &gpus, &holders, at, &mut self.seq));
        Ok(out)
    }
}

/// Runs the agent until shutdown (or `--rounds`), or prints one round with
/// `--once`.
pub async fn run(args: &RunArgs, mut shutdown: Shutdown) -> Result<u64, AgentError> {
    let mut source = open_source(args)?;
    let attributor = attributor(args)?;
    let node = node_name(args);
    let ctx = NodeContext {
        source: format!("gpuledger-collector/{node}"),
        node,
        pool: args.pool.clone(),
        cluster: args.cluster.clone(),
        interval_ms: args.interval_ms,
    };
    let mut round = Round {
        ctx: &ctx,
        attributor: &attributor,
        last_layout: None,
        migs: MigAssignments::default(),
        pods: args.observe_pods.then(PodJobs::default),
        seq: Timestamp::now().as_micros(),
    };
    if args.once {
        let events = round.events(source.as_mut())?;
        let mut out = std::io::stdout().lock();
        for event in &events {
            event.validate().map_err(crate::Error::from)?;
            let _ = writeln!(out, "{}", event.to_json_string());
        }
        return Ok(events.len() as u64);
    }
    let mut spool = Spool::open(&args.spool_dir, args.spool_max_mb * 1024 * 1024)
        .map_err(|e| AgentError::Spool(e.to_string()))?;
    if !spool.is_empty() {
        tracing::info!(
            waiting = spool.len(),
            "spooled events from before are sent first"
        );
    }
    // librdkafka keeps retrying a record until the broker takes it: an
    // outage only makes the spool grow.
    let mut producer = EventProducer::with_settings(
        &args.kafka,
        "gpuledger-collector",
        &[("message.timeout.ms", "0"), kafka::TELEMETRY_COMPRESSION],
    )
    .map_err(crate::Error::from)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|e| {
            AgentError::Config(format!("cannot listen on {} (--listen): {e}", args.listen))
        })?;
    let addr = listener
        .local_addr()
        .map_err(|e| AgentError::Config(e.to_string()))?;
    let jobs_listener = match args.jobs_listen.0 {
        Some(at) => {
            if !at.ip().is_loopback() && args.jobs_token.is_none() {
                return Err(AgentError::Config(format!(
                    "the job endpoint on {at} is reachable from other hosts: give it a token \
                     (--jobs-token or GPULEDGER_COLLECTOR_JOBS_TOKEN), or bind it to 127.0.0.1"
                )));
            }
            Some(tokio::net::TcpListener::bind(at).await.map_err(|e| {
                AgentError::Config(format!("cannot listen on {at} (--jobs-listen): {e}"))
            })?)
        }
        None => None,
    };
    {
        // The first stdout line is the metrics address, the second the job
        // endpoint's, for scripts and tests.
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "metrics listening on http://{addr}");
        if let Some(jobs) = jobs_listener.as_ref().and_then(|l| l.local_addr().ok()) {
            let _ = writeln!(out, "jobs listening on http://{jobs}");
        }
        let _ = out.flush();
    }
    // Job events posted to the endpoint wait here for the loop to spool them.
    let (jobs, mut posted) = tokio::sync::mpsc::channel::<Submission>(64);
    let origin = Origin {
        pool: ctx.pool.clone(),
        cluster: ctx.cluster.clone(),
        node: ctx.node.clone(),
        source: ctx.source.clone(),
    };
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, metrics::router()).await {
            tracing::error!(error = %e, "metrics endpoint stopped");
        }
    });
    if let Some(jobs_listener) = jobs_listener {
        let routes = jobs_api::router(origin, jobs, args.jobs_token.clone());
        tokio::spawn(async move {
            if let Err(e) = axum::serve(jobs_listener, routes).await {
                tracing::error!(error = %e, "job endpoint stopped");
            }
        });
    }
    let mut interval = tokio::time::interval(Duration::from_millis(args.interval_ms as u64));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut delivery = Delivery::default();
    let mut rounds = 0u64;
    tracing::info!(node = %ctx.node, pool = %ctx.pool, source = ?args.source, "collector running");
    loop {
        tokio::select! {
            _ = shutdown.wait() => break,
            Some((event, reply)) = posted.recv() => {
                let spooled = spool.append(std::slice::from_ref(&event)).map_err(|e| e.to_string());
                let kept = spooled.is_ok();
                let _ = reply.send(spooled);
                if kept {
                    metrics::JOB_EVENTS.inc();
                    delivery.pump(&mut spool, &mut producer).await?;
                }
                continue;
            }
            _ = interval.tick() => {}
        }
        let events = round.events(source.as_mut())?;
        for event in &events {
            event.validate().map_err(crate::Error::from)?;
        }
        spool
            .append(&events)
            .map_err(|e| AgentError::Spool(e.to_string()))?;
        delivery.pump(&mut spool, &mut producer).await?;
        metrics::SAMPLES.add(
            events
                .iter()
                .filter(|e| matches!(e.body, gpuledger_schemas::EventBody::GpuSample(_)))
                .count() as u64,
        );
        metrics::HEALTH_EVENTS.add(
            events
                .iter()
                .filter(|e| matches!(e.body, gpuledger_schemas::EventBody::DeviceHealth(_)))
                .count() as u64,
        );
        metrics::SPOOL_BYTES.set(i64::try_from(spool.bytes()).unwrap_or(i64::MAX));
        metrics::SPOOL_RECORDS.set(spool.len() as i64);
        metrics::round_done(args.interval_ms, source.errors());
        rounds += 1;
        if args.rounds > 0 && rounds >= args.rounds {
            break;
        }
    }
    for (call, failures) in source.errors() {
        tracing::info!(call, failures, "NVML call failures");
    }
    // Deliver what is queued within a bound; what is not stays spooled.
    if let Err(e) = producer.flush(Duration::from_secs(10)).await {
        tracing::warn!(error = %e, waiting = spool.len(), "broker slow or away at shutdown; the rest stays in the spool");
    }
    delivery.acknowledge(&mut spool, &mut producer)?;
    tracing::info!(
        delivered = delivery.acked,
        waiting = spool.len(),
        dropped = spool.dropped,
        rounds,
        "collector stopped"
    );
    Ok(delivery.acked)
}

/// Moves events from the spool to the producer and acknowledgements back.
#[derive(Debug, Default)]
struct Delivery {
    /// Deliveries the producer had settled at the last look.
    settled: u64,
    /// Events acknowledged in this run.
    acked: u64,
}

impl Delivery {
    /// Acknowledges what the broker took, in order.
    fn acknowledge(
        &mut self,
        spool: &mut Spool,
        producer: &mut EventProducer,
    ) -> Result<(), AgentError> {
        let settled = producer.settle_ready().map_err(crate::Error::from)?;
        let newly = settled - self.settled;
        self.settled = settled;
        self.acked += newly;
        metrics::DELIVERED.add(newly);
        spool
            .ack(newly as usize)
            .map_err(|e| AgentError::Spool(e.to_string()))
    }

    /// Acknowledges, then hands over waiting events, oldest first, while
    /// fewer than [`IN_FLIGHT`] are out.
    async fn pump(
        &mut self,
        spool: &mut Spool,
        producer: &mut EventProducer,
    ) -> Result<(), AgentError> {
        self.acknowledge(spool, producer)?;
        while spool.in_flight() < IN_FLIGHT {
            let Some(event) = spool.next_to_send() else {
                break;
            };
            let event = event.map_err(crate::Error::from)?;
            producer.send(&event).await.map_err(crate::Error::from)?;
        }
        Ok(())
    }
}
