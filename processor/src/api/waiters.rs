//! Answers for callers waiting on a decision: a consumer of the decisions
//! topic (committed records only) hands each `AdmissionDecision` to whoever
//! waits for its `request_id`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpuledger_common::kafka::KafkaArgs;
use gpuledger_common::shutdown::Shutdown;
use gpuledger_schemas::{Codec, Event, EventBody, Topic};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::sync::oneshot;

use crate::Result;

/// Callers waiting for a decision, by request id.
#[derive(Debug, Clone, Default)]
pub struct Waiters(Arc<Mutex<HashMap<String, Vec<oneshot::Sender<Event>>>>>);

impl Waiters {
    /// Registers interest in `request_id`'s decision; call before the
    /// request is appended so the answer cannot slip past.
    pub fn wait_for(&self, request_id: &str) -> oneshot::Receiver<Event> {
        let (tx, rx) = oneshot::channel();
        if let Ok(mut map) = self.0.lock() {
            map.entry(request_id.to_owned()).or_default().push(tx);
        }
        rx
    }

    /// Forgets a caller that gave up.
    pub fn forget(&self, request_id: &str) {
        if let Ok(mut map) = self.0.lock() {
            map.remove(request_id);
        }
    }

    fn deliver(&self, request_id: &str, decision: &Event) {
        let senders = self
            .0
            .lock()
            .ok()
            .and_then(|mut map| map.remove(request_id));
        for tx in senders.into_iter().flatten() {
            let _ = tx.send(decision.clone());
        }
    }
}

/// Reads the decisions topic from its end until shutdown.
pub async fn listen(kafka: &KafkaArgs, waiters: Waiters, mut shutdown: Shutdown) -> Result<()> {
    let topic = kafka.topic(Topic::Decisions);
    let consumer: StreamConsumer = kafka
        .client_config(&[
            ("group.id", "gpuledger-control-api"),
            ("client.id", "gpuledger-processor-api"),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
        ])?
        .create()?;
    let metadata = consumer.fetch_metadata(Some(&topic), Duration::from_secs(30))?;
    let mut assignment = TopicPartitionList::new();
    for t in metadata.topics().iter().filter(|t| t.name() == topic) {
        for p in t.partitions() {
            assignment.add_partition_offset(&topic, p.id(), Offset::End)?;
        }
    }
    consumer.assign(&assignment)?;
    let codec = Codec::builtin();
    loop {
        let message = tokio::select! {
            _ = shutdown.wait() => return Ok(()),
            m = consumer.recv() => m,
        };
        let message = match message {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "decisions consumer error; retrying");
                continue;
            }
        };
        if let Ok(event) = codec.decode(message.payload().unwrap_or_default())
            && let EventBody::AdmissionDecision(d) = &event.body
        {
            waiters.deliver(&d.request_id, &event);
        }
    }
}
