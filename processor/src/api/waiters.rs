//! The reader of the decisions and DLQ topics (committed records only):
//! answers for waiters whose events another instance's ledger worker
//! decided. This instance's own worker answers directly (see
//! [`crate::answers`]).

use gpuledger_common::kafka::{DLQ_REASON_HEADER, KafkaArgs, header_text};
use gpuledger_common::shutdown::Shutdown;
use gpuledger_schemas::{Codec, EVENT_ID_HEADER, Topic};
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::Result;
use crate::answers::Waiters;

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
            if let (Some(id), Some(reason)) = (
                header_text(&message, EVENT_ID_HEADER),
                header_text(&message, DLQ_REASON_HEADER),
            ) {
                waiters.rejected(&id, &reason);
            }
            continue;
        }
        let Ok(event) = codec.decode(message.payload().unwrap_or_default()) else {
            continue;
        };
        waiters.decided(&event);
    }
}
