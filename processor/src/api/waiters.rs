//! Answers for callers waiting on the ledger: a consumer of the decisions
//! and DLQ topics (committed records only) hands each decision to whoever
//! waits for the event that caused it — or, for admissions, for its
//! `request_id` (a repeated request is answered with the original decision,
//! whose cause is the first request) — and each dead letter to whoever
//! waits for the rejected event.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gpuledger_common::kafka::{DLQ_REASON_HEADER, KafkaArgs};
use gpuledger_common::shutdown::Shutdown;
use gpuledger_schemas::{Codec, Event, EventBody, Topic};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::Headers;
use rdkafka::{Message, Offset, TopicPartitionList};
use tokio::sync::mpsc;

use crate::Result;

/// What the ledger made of an event.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A decision it caused.
    Decision(Box<Event>),
    /// It was rejected, with the reason.
    Rejected(String),
}

/// What a caller waits for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    /// Decisions caused by, or the rejection of, the event with this id.
    Cause(String),
    /// The decision of this admission request id.
    Request(String),
}

type Senders = HashMap<Key, Vec<mpsc::UnboundedSender<Answer>>>;

/// Callers waiting for answers.
#[derive(Debug, Clone, Default)]
pub struct Waiters(Arc<Mutex<Senders>>);

impl Waiters {
    /// Registers interest in any of `keys`; call before the event is
    /// appended so the answer cannot slip past. The first answer wins.
    pub fn wait_for(&self, keys: &[Key]) -> mpsc::UnboundedReceiver<Answer> {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut map) = self.0.lock() {
            for key in keys {
                map.entry(key.clone()).or_default().push(tx.clone());
            }
        }
        rx
    }

    /// Forgets the waiters of `keys` (answered, or gave up).
    pub fn forget(&self, keys: &[Key]) {
        if let Ok(mut map) = self.0.lock() {
            for key in keys {
                map.remove(key);
            }
        }
    }

    fn deliver(&self, key: &Key, answer: &Answer) {
        let senders = self.0.lock().ok().and_then(|map| map.get(key).cloned());
        for tx in senders.into_iter().flatten() {
            let _ = tx.send(answer.clone());
        }
    }
}

fn cause_of(event: &Event) -> Option<&str> {
    Some(match &event.body {
        EventBody::AdmissionDecision(d) => &d.cause_event_id,
        EventBody::ReservationDecision(d) => &d.cause_event_id,
        EventBody::BurstTriggered(d) => &d.cause_event_id,
        EventBody::Reclassified(d) => &d.cause_event_id,
        EventBody::QuotaViolation(d) => &d.cause_event_id,
        EventBody::BudgetAlert(d) => &d.cause_event_id,
        EventBody::UnmeteredUsage(d) => &d.cause_event_id,
        _ => return None,
    })
}

/// Reads the decisions and DLQ topics from their ends until shutdown.
pub async fn listen(kafka: &KafkaArgs, waiters: Waiters, mut shutdown: Shutdown) -> Result<()> {
    let decisions = kafka.topic(Topic::Decisions);
    let dlq = kafka.topic(Topic::Dlq);
    let consumer: StreamConsumer = kafka
        .client_config(&[
            ("group.id", "gpuledger-control-api"),
            ("client.id", "gpuledger-processor-api"),
            ("enable.auto.commit", "false"),
            ("isolation.level", "read_committed"),
        ])?
        .create()?;
    let mut assignment = TopicPartitionList::new();
    for topic in [&decisions, &dlq] {
        for partition in crate::ledger_worker::partitions_of(&consumer, topic)? {
            assignment.add_partition_offset(topic, partition, Offset::End)?;
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
        if message.topic() == dlq {
            let header = |name: &str| {
                message.headers().and_then(|h| {
                    h.iter()
                        .find(|x| x.key == name)
                        .and_then(|x| x.value)
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                })
            };
            if let (Some(id), Some(reason)) = (header("ce_id"), header(DLQ_REASON_HEADER)) {
                waiters.deliver(&Key::Cause(id), &Answer::Rejected(reason));
            }
            continue;
        }
        let Ok(event) = codec.decode(message.payload().unwrap_or_default()) else {
            continue;
        };
        let answer = Answer::Decision(Box::new(event.clone()));
        if let EventBody::AdmissionDecision(d) = &event.body {
            waiters.deliver(&Key::Request(d.request_id.clone()), &answer);
        }
        if let Some(cause) = cause_of(&event) {
            waiters.deliver(&Key::Cause(cause.to_owned()), &answer);
        }
    }
}
