//! The processor's metrics, in one place. A log line and its counter are
//! emitted together where the thing happens.

use gpuledger_common::metrics::{Counter, CounterFamily, Metric};

pub static LEDGER_EVENTS_APPLIED: Counter = Counter::new(
    "gpuledger_ledger_events_applied_total",
    "Ledger events applied by the state machine.",
);
pub static LEDGER_EVENTS_REJECTED: Counter = Counter::new(
    "gpuledger_ledger_events_rejected_total",
    "Ledger events rejected (undecodable or contradicting the state) and sent to the DLQ.",
);
pub static LEDGER_EVENTS_DUPLICATE: Counter = Counter::new(
    "gpuledger_ledger_events_duplicate_total",
    "Ledger events ignored because their event_id was applied before.",
);
pub static DECISIONS_EMITTED: Counter = Counter::new(
    "gpuledger_decisions_emitted_total",
    "Decisions committed to the decisions topic.",
);
pub static DECISION_TRANSACTIONS: Counter = Counter::new(
    "gpuledger_decision_transactions_total",
    "Kafka transactions committed by the ledger worker.",
);
pub static LEDGER_WORKER_RESTARTS: Counter = Counter::new(
    "gpuledger_ledger_worker_restarts_total",
    "Times the ledger worker restarted from the committed offsets after a Kafka error.",
);
/// Committed `BudgetAlert` decisions (thresholds 50, 80 and 100 %).
pub static BUDGET_ALERTS: CounterFamily = CounterFamily::new(
    "gpuledger_budget_alerts_total",
    "BudgetAlert decisions committed, by tenant, pool and threshold (%).",
    &["tenant", "pool", "threshold"],
);
pub static TELEMETRY_RECORDS_POLLED: Counter = Counter::new(
    "gpuledger_telemetry_records_polled_total",
    "Telemetry records the writer polled from Kafka, durable or not yet.",
);
pub static SAMPLES_WRITTEN: Counter = Counter::new(
    "gpuledger_samples_written_total",
    "GpuSample rows written durably to the samples table.",
);
pub static HISTORY_FILES_WRITTEN: Counter = Counter::new(
    "gpuledger_history_files_written_total",
    "Parquet history files written.",
);
pub static HISTORY_FILES_COMPACTED: Counter = Counter::new(
    "gpuledger_history_files_compacted_total",
    "History files merged away by the background compaction.",
);
pub static COMPACTION_FAILURES: Counter = Counter::new(
    "gpuledger_compaction_failures_total",
    "Background compaction rounds that failed (the next round tries again).",
);
pub static TELEMETRY_DEAD_LETTERS: Counter = Counter::new(
    "gpuledger_telemetry_dead_letters_total",
    "Telemetry records sent to the DLQ.",
);
pub static API_REQUESTS_REFUSED: Counter = Counter::new(
    "gpuledger_api_requests_refused_total",
    "Control API requests answered with a 4xx.",
);

pub static BURST_HOOK_DELIVERED: Counter = Counter::new(
    "gpuledger_burst_hook_delivered_total",
    "BurstTriggered decisions the burst provider hook accepted.",
);
pub static BURST_HOOK_FAILED: Counter = Counter::new(
    "gpuledger_burst_hook_failed_total",
    "BurstTriggered decisions the burst provider hook could not deliver.",
);

/// The text exposition of every metric of the processor, for `/metrics`.
pub fn render() -> String {
    let mut text = gpuledger_common::metrics::render(&all());
    text.push_str(&BUDGET_ALERTS.render());
    text.push_str(&ADMISSION_SECONDS.render());
    text.push_str(&ADMISSION_APPEND_SECONDS.render());
    text.push_str(&DECISION_TRANSACTION_SECONDS.render());
    text
}

/// Buckets of the latency histograms, in microseconds.
const LATENCY_BUCKETS: &[u64] = &[
    1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    5_000_000, 10_000_000,
];

/// The first leg of an admission (or reservation): until the broker has
/// the request.
pub static ADMISSION_APPEND_SECONDS: gpuledger_common::metrics::Histogram =
    gpuledger_common::metrics::Histogram::new(
        "gpuledger_admission_append_seconds",
        "Time to append a request that waits for its decision (admission, reservation) to the ledger, acknowledged by the broker.",
        LATENCY_BUCKETS,
    );

/// One decision transaction of the ledger worker: begin to commit.
pub static DECISION_TRANSACTION_SECONDS: gpuledger_common::metrics::Histogram =
    gpuledger_common::metrics::Histogram::new(
        "gpuledger_decision_transaction_seconds",
        "Time of one decision transaction, from its begin to its commit.",
        LATENCY_BUCKETS,
    );

/// Time from an admission request's arrival at the control API (HTTP or
/// the Kubernetes webhook) to its decision's answer: through the broker,
/// the ledger worker and back.
pub static ADMISSION_SECONDS: gpuledger_common::metrics::Histogram =
    gpuledger_common::metrics::Histogram::new(
        "gpuledger_admission_seconds",
        "Time from an admission request to its answered decision.",
        LATENCY_BUCKETS,
    );

/// Every unlabelled metric of the processor.
pub fn all() -> Vec<Metric> {
    [
        &LEDGER_EVENTS_APPLIED,
        &LEDGER_EVENTS_REJECTED,
        &LEDGER_EVENTS_DUPLICATE,
        &DECISIONS_EMITTED,
        &DECISION_TRANSACTIONS,
        &LEDGER_WORKER_RESTARTS,
        &TELEMETRY_RECORDS_POLLED,
        &SAMPLES_WRITTEN,
        &HISTORY_FILES_WRITTEN,
        &HISTORY_FILES_COMPACTED,
        &COMPACTION_FAILURES,
        &TELEMETRY_DEAD_LETTERS,
        &API_REQUESTS_REFUSED,
        &BURST_HOOK_DELIVERED,
        &BURST_HOOK_FAILED,
    ]
    .into_iter()
    .map(Metric::Counter)
    .collect()
}
