//! The gpuledger collector: the agent on every GPU node.
//!
//! It reads devices (NVML, or a simulated fleet), turns what it sees into
//! contract events and delivers them to Kafka: `GpuSample`s to the
//! telemetry topic, inventory to the ledger. It owns no ledger logic.

pub mod agent;
pub mod attribution;
pub mod config;
pub mod job;
pub mod jobs_api;
pub mod metrics;
pub mod nvml;
pub mod pods;
pub mod sim;
pub mod spool;

use std::io::Write;
use std::time::Duration;

use gpuledger_common::kafka::{self, EventProducer};
use gpuledger_common::shutdown::Shutdown;
use gpuledger_schemas::{Event, EventBody};
use serde::Serialize;

pub use config::SimulateArgs;
use sim::SimulatedFleet;

/// What went wrong in the collector.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Delivery to Kafka failed.
    #[error(transparent)]
    Kafka(#[from] kafka::Error),
    /// A produced event broke the contract (a bug in a source).
    #[error("source produced an invalid event: {0}")]
    Invalid(#[from] gpuledger_schemas::Error),
    /// Settings that do not work.
    #[error("{0}")]
    Config(String),
}

/// Result with the collector's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Totals of what a run delivered, so a test or a script can check what
/// arrived downstream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub inventories: u64,
    pub samples: u64,
    /// Admission requests and job events of the tenants' jobs.
    pub admission_requests: u64,
    pub job_events: u64,
    pub sum_mem_used_bytes: i64,
    pub sum_energy_mj: i64,
    pub sum_seq: i64,
    pub first_time: Option<String>,
    pub last_time: Option<String>,
}

impl Summary {
    fn record(&mut self, event: &Event) {
        match &event.body {
            EventBody::NodeInventory(_) => self.inventories += 1,
            EventBody::AdmissionRequest(_) => self.admission_requests += 1,
            EventBody::JobEvent(_) => self.job_events += 1,
            EventBody::GpuSample(s) => {
                self.samples += 1;
                self.sum_mem_used_bytes += s.mem_used_bytes;
                self.sum_energy_mj += s.energy_mj.unwrap_or(0);
                self.sum_seq += s.seq;
                let at = event.envelope.event_time.to_string();
                self.first_time.get_or_insert_with(|| at.clone());
                self.last_time = Some(at);
            }
            _ => {}
        }
    }
}

/// Sends one event (from `job start|end`) and waits until the broker has it.
pub async fn send_one(kafka: &gpuledger_common::kafka::KafkaArgs, event: &Event) -> Result<()> {
    event.validate()?;
    let mut producer = EventProducer::new(kafka, "gpuledger-collector-job")?;
    producer.send(event).await?;
    producer.flush(Duration::from_secs(30)).await?;
    Ok(())
}

/// Runs the simulated fleet: inventory first, then one round of samples per
/// tick, until `ticks` rounds were sent or shutdown is requested.
pub async fn run_simulation(args: &SimulateArgs, mut shutdown: Shutdown) -> Result<Summary> {
    let spec = args.fleet_spec().map_err(Error::Config)?;
    let mut out = SimOutput {
        producer: match args.dry_run {
            true => None,
            false => Some(EventProducer::with_settings(
                &args.kafka,
                "gpuledger-collector-sim",
                &[kafka::TELEMETRY_COMPRESSION],
            )?),
        },
        ledger: match &args.ledger_ndjson {
            Some(path) => Some(std::io::BufWriter::new(
                std::fs::File::create(path).map_err(|e| {
                    Error::Config(format!("--ledger-ndjson {}: {e}", path.display()))
                })?,
            )),
            None => None,
        },
        summary: Summary::default(),
    };
    let nodes = spec.layout.nodes.len();
    let gpus: usize = spec.layout.nodes.iter().map(|n| n.gpus.len()).sum();
    let mut fleet = SimulatedFleet::new(spec);
    let mut api = args.api.as_ref().map(|url| ApiAdmit {
        url: format!("{}/v1/admission", url.trim_end_matches('/')),
        token: args.api_token.clone(),
        unreachable: false,
    });
    tracing::info!(
        nodes,
        gpus,
        pool = %args.pool,
        ticks = args.ticks,
        "simulated fleet starting"
    );
    for event in fleet.inventory() {
        out.send(&event).await?;
    }
    let mut tick = 0u64;
    while args.ticks == 0 || tick < args.ticks {
        if shutdown.is_requested() || args.until.is_some_and(|until| fleet.next_time() > until) {
            break;
        }
        let events = match api.as_mut() {
            // The API is asked with a blocking call, off the async workers.
            Some(api) => tokio::task::block_in_place(|| fleet.tick_with(api)),
            None => fleet.tick(),
        };
        for event in events {
            out.send(&event).await?;
        }
        tick += 1;
        if let Some(pause) = args.pause() {
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                _ = shutdown.wait() => break,
            }
        }
    }
    out.finish().await
}

/// Where a simulation's events go: Kafka (unless a dry run), and the ledger
/// events also to an NDJSON file if asked.
struct SimOutput {
    producer: Option<EventProducer>,
    ledger: Option<std::io::BufWriter<std::fs::File>>,
    summary: Summary,
}

impl SimOutput {
    async fn send(&mut self, event: &Event) -> Result<()> {
        event.validate()?;
        if let Some(producer) = self.producer.as_mut() {
            producer.send(event).await?;
        }
        if let Some(file) = self.ledger.as_mut()
            && !matches!(event.body, EventBody::GpuSample(_))
        {
            writeln!(file, "{}", event.to_json_string())
                .map_err(|e| Error::Config(format!("--ledger-ndjson: {e}")))?;
        }
        self.summary.record(event);
        Ok(())
    }

    /// Waits for the broker to have everything and closes the file.
    async fn finish(mut self) -> Result<Summary> {
        if let Some(file) = self.ledger.as_mut() {
            file.flush()
                .map_err(|e| Error::Config(format!("--ledger-ndjson: {e}")))?;
        }
        if let Some(producer) = self.producer.as_mut() {
            producer.flush(Duration::from_secs(60)).await?;
            tracing::info!(
                samples = self.summary.samples,
                delivered = producer.delivered(),
                "simulated fleet done"
            );
        }
        Ok(self.summary)
    }
}

/// Asks the processor's control API whether a simulated job may start.
struct ApiAdmit {
    url: String,
    token: Option<String>,
    /// Said once: the API could not be reached.
    unreachable: bool,
}

impl sim::Admit for ApiAdmit {
    fn admit(&mut self, request: &gpuledger_schemas::events::AdmissionRequest) -> sim::Admission {
        let mut call = ureq::post(&self.url).timeout(Duration::from_secs(30));
        if let Some(token) = &self.token {
            call = call.set("Authorization", &format!("Bearer {token}"));
        }
        let body = serde_json::json!({
            "pool": request.pool,
            "request_id": request.request_id,
            "job_id": request.job_id,
            "attempt": request.attempt,
            "tenant": request.tenant,
            "slices": request.slices,
            "max_slices": request.max_slices,
        });
        match call.send_json(body) {
            Ok(answer) => {
                self.unreachable = false;
                let decision: serde_json::Value = answer.into_json().unwrap_or_default();
                if decision["decision"] == "admit" {
                    sim::Admission::Admitted
                } else {
                    sim::Admission::Denied
                }
            }
            Err(ureq::Error::Status(code, answer)) => {
                // Refused or not decided in time: a scheduler would not
                // start the job (a late admission's hold expires).
                let text = answer.into_string().unwrap_or_default();
                tracing::warn!(code, request_id = %request.request_id, answer = %text, "admission not granted");
                sim::Admission::Denied
            }
            Err(e) => {
                if !self.unreachable {
                    tracing::warn!(url = %self.url, error = %e, "control API unreachable; admission requests go to the ledger directly");
                    self.unreachable = true;
                }
                sim::Admission::Send
            }
        }
    }
}
