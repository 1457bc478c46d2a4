//! The collector's `/metrics` and `/healthz`.
//!
//! `/healthz` answers 200 while rounds keep coming (the last one less than
//! three intervals ago) and 503 otherwise, so a stuck NVML call or a dead
//! loop shows.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use gpuledger_common::metrics::{Counter, Gauge, Metric, render, render_family};
use gpuledger_schemas::Timestamp;

pub static SAMPLES: Counter = Counter::new(
    "gpuledger_collector_samples_total",
    "GpuSample events made.",
);
pub static DELIVERED: Counter = Counter::new(
    "gpuledger_collector_delivered_total",
    "Events the broker acknowledged.",
);
pub static HEALTH_EVENTS: Counter = Counter::new(
    "gpuledger_collector_health_events_total",
    "DeviceHealth events made from XID and ECC events.",
);
pub static JOB_EVENTS: Counter = Counter::new(
    "gpuledger_collector_job_events_total",
    "Job events posted to the job endpoint and spooled.",
);
pub static SPOOL_DROPPED: Counter = Counter::new(
    "gpuledger_collector_spool_dropped_total",
    "Events dropped because the spool was full.",
);
pub static SPOOL_BYTES: Gauge = Gauge::new(
    "gpuledger_collector_spool_bytes",
    "Bytes in the spool file.",
);
pub static SPOOL_RECORDS: Gauge = Gauge::new(
    "gpuledger_collector_spool_records",
    "Events waiting in the spool for an acknowledgement.",
);

/// When the last round finished, microseconds since the epoch.
static LAST_ROUND: AtomicI64 = AtomicI64::new(0);
/// The round interval, microseconds.
static INTERVAL: AtomicI64 = AtomicI64::new(0);
/// Failed NVML calls by call name, as of the last round.
static NVML_ERRORS: Mutex<BTreeMap<&'static str, u64>> = Mutex::new(BTreeMap::new());

/// Notes a finished round.
pub fn round_done(interval_ms: i32, nvml_errors: BTreeMap<&'static str, u64>) {
    INTERVAL.store(i64::from(interval_ms) * 1_000, Ordering::Relaxed);
    LAST_ROUND.store(Timestamp::now().as_micros(), Ordering::Relaxed);
    if let Ok(mut errors) = NVML_ERRORS.lock() {
        *errors = nvml_errors;
    }
}

fn exposition() -> String {
    let mut text = render(&[
        Metric::Counter(&SAMPLES),
        Metric::Counter(&DELIVERED),
        Metric::Counter(&HEALTH_EVENTS),
        Metric::Counter(&JOB_EVENTS),
        Metric::Counter(&SPOOL_DROPPED),
        Metric::Gauge(&SPOOL_BYTES),
        Metric::Gauge(&SPOOL_RECORDS),
    ]);
    let errors: Vec<(String, i64)> = NVML_ERRORS
        .lock()
        .map(|m| {
            m.iter()
                .map(|(call, n)| ((*call).to_owned(), i64::try_from(*n).unwrap_or(i64::MAX)))
                .collect()
        })
        .unwrap_or_default();
    text.push_str(&render_family(
        "gpuledger_collector_nvml_errors_total",
        "Failed NVML calls (unsupported ones aside), by call.",
        "counter",
        "call",
        &errors,
    ));
    text
}

fn healthy() -> bool {
    let last = LAST_ROUND.load(Ordering::Relaxed);
    let interval = INTERVAL.load(Ordering::Relaxed);
    last > 0 && Timestamp::now().as_micros() - last < 3 * interval.max(1_000_000)
}

/// The routes.
pub fn router() -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    exposition(),
                )
            }),
        )
        .route(
            "/healthz",
            get(|| async {
                if healthy() {
                    (StatusCode::OK, "ok\n").into_response()
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, "no recent round\n").into_response()
                }
            }),
        )
}
