//! The burst provider hook (issue: on-demand capacity). Every committed
//! `BurstTriggered` decision is POSTed as JSON to a configured URL, so a
//! provider can bring on-demand nodes up with no administrator involved.
//!
//! Delivery runs on its own task and never blocks the ledger: the worker
//! hands decisions over a bounded channel (a full channel drops the call,
//! counted and logged), each call is retried with exponential backoff, and
//! the decision's `event_id` travels as `Idempotency-Key` so a provider
//! that sees a retry twice acts once.

use std::time::Duration;

use gpuledger_schemas::{Event, EventBody};
use tokio::sync::mpsc;

use crate::metrics;

/// Settings of the hook.
#[derive(Debug, Clone)]
pub struct BurstHookConfig {
    pub url: String,
    /// Tries per decision, the first included.
    pub attempts: u32,
    /// Wait before the first retry; doubled before each later one.
    pub backoff: Duration,
    /// Limit of one HTTP call.
    pub timeout: Duration,
}

/// The worker's end of the hook.
#[derive(Debug, Clone)]
pub struct BurstHook {
    tx: mpsc::Sender<Event>,
}

const QUEUE: usize = 10_000;

impl BurstHook {
    /// Starts the delivery task.
    pub fn spawn(config: BurstHookConfig) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(deliver(config, rx));
        Self { tx }
    }

    /// Hands a committed decision over; only `BurstTriggered` is sent.
    pub fn notify(&self, decision: Event) {
        if !matches!(decision.body, EventBody::BurstTriggered(_)) {
            return;
        }
        let id = decision.envelope.event_id.clone();
        if self.tx.try_send(decision).is_err() {
            metrics::BURST_HOOK_FAILED.inc();
            tracing::error!(decision = %id, "burst hook queue full; call dropped");
        }
    }
}

async fn deliver(config: BurstHookConfig, mut rx: mpsc::Receiver<Event>) {
    let agent = ureq::AgentBuilder::new().timeout(config.timeout).build();
    while let Some(decision) = rx.recv().await {
        let key = decision.envelope.event_id.clone();
        let body = decision.to_json_value();
        let mut wait = config.backoff;
        let mut delivered = false;
        for attempt in 1..=config.attempts.max(1) {
            let (agent, url, call_key, body) =
                (agent.clone(), config.url.clone(), key.clone(), body.clone());
            let result = tokio::task::spawn_blocking(move || {
                agent
                    .post(&url)
                    .set("Idempotency-Key", &call_key)
                    .send_json(body)
                    .map(|r| r.status())
                    .map_err(|e| e.to_string())
            })
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
            match result {
                Ok(status) => {
                    metrics::BURST_HOOK_DELIVERED.inc();
                    tracing::info!(decision = %key, status, attempt, "burst hook called");
                    delivered = true;
                    break;
                }
                Err(error) => {
                    tracing::warn!(decision = %key, attempt, %error, "burst hook call failed");
                    if attempt < config.attempts {
                        tokio::time::sleep(wait).await;
                        wait *= 2;
                    }
                }
            }
        }
        if !delivered {
            metrics::BURST_HOOK_FAILED.inc();
            tracing::error!(decision = %key, attempts = config.attempts, url = %config.url, "burst hook gave up");
        }
    }
}
