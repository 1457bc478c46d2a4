//! The telemetry writer: `gpuledger.telemetry` → the `samples` table and
//! its `device_hourly` roll-up.
//!
//! Records are buffered per partition and written as one Parquet file per
//! contiguous offset range and UTC day. Offsets are stored for commit only
//! after the file is durable, and on start every record at or below the
//! highest offset already in a file is skipped: no row twice, none lost.
//! The roll-up of a buffer is written, under the same name, just before
//! its samples file; a roll-up a crash left without its samples file is
//! removed on start, as the records it summed will be read again.

use gpuledger_common::history::HistoryRoot;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use gpuledger_common::kafka::{DeadLetters, KafkaArgs};
use gpuledger_common::shutdown::Shutdown;
use gpuledger_schemas::{Codec, EventBody, Topic};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::history::hourly;
use crate::history::layout::{FileName, durable_offsets, remove_beyond, remove_leftovers};
use crate::history::samples::{self, SamplesBuilder};
use crate::history::sink::write_file;
use crate::{Error, Result, metrics};

/// When a partition's buffer becomes a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RollingPolicy {
    /// Roll once this many rows are buffered.
    pub max_rows: usize,
    /// Roll once the oldest buffered row waited this long.
    pub max_age: Duration,
}

/// Settings of the telemetry writer.
#[derive(Debug, Clone)]
pub struct TelemetryWriterConfig {
    pub kafka: KafkaArgs,
    pub group_id: String,
    /// Static membership in the group (`group.instance.id`): a restart
    /// resumes its partitions at once instead of after the session timeout.
    pub group_instance_id: Option<String>,
    pub history_root: HistoryRoot,
    pub rolling: RollingPolicy,
}

/// Rows of one partition waiting to become a file.
#[derive(Debug, Default)]
struct PartitionBuffer {
    rows: SamplesBuilder,
    first_offset: Option<i64>,
    last_offset: i64,
    /// The UTC day of the rows: days since the epoch, to compare, and
    /// `YYYY-MM-DD`, formatted once per file for its folder.
    day: i64,
    date: String,
    opened: Option<Instant>,
}

/// A file being written off the consumer's task; its offsets are stored
/// once it is durable, before anything after it.
struct Writing {
    partition: i32,
    last_offset: i64,
    rows: usize,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl PartitionBuffer {
    fn note_offset(&mut self, offset: i64) {
        self.first_offset.get_or_insert(offset);
        self.last_offset = offset;
        self.opened.get_or_insert_with(Instant::now);
    }
}

/// Runs until shutdown: consume, buffer, roll files, commit.
pub async fn run(config: &TelemetryWriterConfig, mut shutdown: Shutdown) -> Result<()> {
    let topic = config.kafka.topic(Topic::Telemetry);
    let mut settings = vec![
        ("group.id", config.group_id.as_str()),
        // A crashed member holds its partitions until its session times
        // out; keep that short so a restart resumes within seconds.
        ("session.timeout.ms", "10000"),
        ("heartbeat.interval.ms", "2000"),
        ("client.id", "gpuledger-processor-telemetry"),
        ("enable.auto.commit", "true"),
        ("auto.commit.interval.ms", "1000"),
        ("enable.auto.offset.store", "false"),
        ("auto.offset.reset", "earliest"),
        ("isolation.level", "read_committed"),
        // Notice topics (and partitions) created after start within seconds.
        ("topic.metadata.refresh.interval.ms", "5000"),
    ];
    let instance = config
        .group_instance_id
        .as_ref()
        .map(|id| format!("{id}-telemetry"));
    if let Some(id) = &instance {
        settings.push(("group.instance.id", id));
    }
    let consumer: StreamConsumer = config.kafka.client_config(&settings)?.create()?;
    consumer.subscribe(&[&topic])?;
    let dead_letters = DeadLetters::new(&config.kafka, "gpuledger-processor-dlq")?;
    let codec = Codec::builtin();
    let leftovers = remove_leftovers(&config.history_root, samples::TABLE, None)?
        + remove_leftovers(&config.history_root, hourly::TABLE, None)?;
    if leftovers > 0 {
        tracing::info!(
            leftovers,
            "removed temporary files of writes a crash interrupted"
        );
    }
    let mut durable = durable_offsets(&config.history_root, samples::TABLE, &topic)?;
    let orphans = remove_beyond(&config.history_root, hourly::TABLE, &topic, &durable, None)?;
    if orphans > 0 {
        tracing::info!(
            orphans,
            "removed roll-ups whose samples file a crash prevented"
        );
    }
    let mut buffers: HashMap<i32, PartitionBuffer> = HashMap::new();
    let mut writing: Option<Writing> = None;
    let mut ticker = tokio::time::interval(config.rolling.max_age.min(Duration::from_secs(1)));
    tracing::info!(%topic, root = %config.history_root, "telemetry writer started");

    loop {
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = ticker.tick() => {
                // A file written by now has its offsets stored now, not at
                // the next flush: a quiet topic must not hold them back.
                if writing.as_ref().is_some_and(|w| w.task.is_finished()) {
                    settle(&consumer, &topic, &mut writing, &mut durable).await?;
                }
                let due: Vec<i32> = buffers
                    .iter()
                    .filter(|(_, b)| b.opened.is_some_and(|t| t.elapsed() >= config.rolling.max_age))
                    .map(|(p, _)| *p)
                    .collect();
                for partition in due {
                    let buffer = buffers.remove(&partition);
                    flush(config, &consumer, &topic, partition, buffer, &mut writing, &mut durable).await?;
                }
            }
            message = consumer.recv() => {
                let message = match message {
                    Ok(m) => m,
                    Err(e) => {
                        tracing::warn!(error = %e, "telemetry consumer error; retrying");
                        continue;
                    }
                };
                let partition = message.partition();
                let offset = message.offset();
                if durable.get(&partition).is_some_and(|&done| offset <= done) {
                    continue;
                }
                let decoded = codec
                    .decode(message.payload().unwrap_or_default())
                    .and_then(|event| event.validate().map(|()| event));
                let event = match decoded {
                    Ok(event) => event,
                    Err(e) => {
                        metrics::TELEMETRY_DEAD_LETTERS.inc();
                        tracing::warn!(partition, offset, error = %e, "telemetry record sent to the DLQ");
                        dead_letters.send(&message, &e.to_string()).await?;
                        buffers.entry(partition).or_default().note_offset(offset);
                        continue;
                    }
                };
                let EventBody::GpuSample(sample) = &event.body else {
                    let reason = format!("{} does not belong on {topic}", event.event_type().name());
                    metrics::TELEMETRY_DEAD_LETTERS.inc();
                    tracing::warn!(partition, offset, %reason, "telemetry record sent to the DLQ");
                    dead_letters.send(&message, &reason).await?;
                    buffers.entry(partition).or_default().note_offset(offset);
                    continue;
                };
                let day = event.envelope.event_time.day();
                let rolls_day = buffers.get(&partition).is_some_and(|b| !b.rows.is_empty() && b.day != day);
                if rolls_day {
                    let buffer = buffers.remove(&partition);
                    flush(config, &consumer, &topic, partition, buffer, &mut writing, &mut durable).await?;
                }
                let buffer = buffers.entry(partition).or_default();
                if buffer.rows.is_empty() {
                    buffer.day = day;
                    buffer.date = event.envelope.event_time.date_string();
                }
                buffer.rows.push(&event.envelope, sample);
                buffer.note_offset(offset);
                if buffer.rows.len() >= config.rolling.max_rows {
                    let buffer = buffers.remove(&partition);
                    flush(config, &consumer, &topic, partition, buffer, &mut writing, &mut durable).await?;
                }
            }
        }
    }
    let partitions: Vec<i32> = buffers.keys().copied().collect();
    for partition in partitions {
        let buffer = buffers.remove(&partition);
        flush(
            config,
            &consumer,
            &topic,
            partition,
            buffer,
            &mut writing,
            &mut durable,
        )
        .await?;
    }
    settle(&consumer, &topic, &mut writing, &mut durable).await?;
    if let Err(e) = consumer.commit_consumer_state(CommitMode::Sync) {
        // Nothing consumed yet is not a failure.
        tracing::debug!(error = %e, "final commit");
    }
    tracing::info!("telemetry writer stopped");
    Ok(())
}

/// Waits for the file being written, if any, and stores its offsets.
async fn settle(
    consumer: &StreamConsumer,
    topic: &str,
    writing: &mut Option<Writing>,
    durable: &mut HashMap<i32, i64>,
) -> Result<()> {
    let Some(file) = writing.take() else {
        return Ok(());
    };
    file.task
        .await
        .map_err(|e| Error::History(format!("writing a samples file: {e}")))??;
    metrics::SAMPLES_WRITTEN.add(file.rows as u64);
    metrics::HISTORY_FILES_WRITTEN.inc();
    store_next(consumer, topic, file.partition, file.last_offset + 1)?;
    durable.insert(file.partition, file.last_offset);
    Ok(())
}

/// Stores `next` as the offset the group resumes `partition` from at the
/// next commit. (Not `store_offset`: librdkafka's `rd_kafka_offset_store`
/// stores the offset it is given plus one, which would skip a record.)
fn store_next(consumer: &StreamConsumer, topic: &str, partition: i32, next: i64) -> Result<()> {
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Offset(next))?;
    consumer.store_offsets(&list)?;
    Ok(())
}

/// Makes a partition's buffer a durable file: sorted, rolled up and
/// written on a blocking thread while the consumer reads on. One file is
/// written at a time; its offsets are stored once it is durable, before
/// the next file starts, so offsets are stored in order.
async fn flush(
    config: &TelemetryWriterConfig,
    consumer: &StreamConsumer,
    topic: &str,
    partition: i32,
    buffer: Option<PartitionBuffer>,
    writing: &mut Option<Writing>,
    durable: &mut HashMap<i32, i64>,
) -> Result<()> {
    settle(consumer, topic, writing, durable).await?;
    let Some(mut buffer) = buffer else {
        return Ok(());
    };
    let Some(first_offset) = buffer.first_offset else {
        return Ok(());
    };
    if buffer.rows.is_empty() {
        // Only records sent to the DLQ: nothing to write.
        store_next(consumer, topic, partition, buffer.last_offset + 1)?;
        durable.insert(partition, buffer.last_offset);
        return Ok(());
    }
    let rows = buffer.rows.len();
    let batch = buffer
        .rows
        .finish()
        .map_err(|e| Error::History(e.to_string()))?;
    let name = FileName {
        topic: topic.to_owned(),
        partition,
        first_offset,
        last_offset: buffer.last_offset,
    };
    let date = std::mem::take(&mut buffer.date);
    let root = config.history_root.clone();
    let task = tokio::task::spawn_blocking(move || {
        let history = |e: arrow::error::ArrowError| Error::History(e.to_string());
        // Sorted first: the roll-up walks each device's samples in time
        // order, which the sorted batch already is.
        let batch = samples::sorted(&batch).map_err(history)?;
        let rolled_up = hourly::roll_up(&batch).map_err(history)?;
        write_file(&root, hourly::TABLE, &date, &name, &rolled_up)?;
        write_file(&root, samples::TABLE, &date, &name, &batch)?;
        tracing::debug!(file = %name.render(), rows, "samples file written");
        Ok(())
    });
    *writing = Some(Writing {
        partition,
        last_offset: buffer.last_offset,
        rows,
        task,
    });
    Ok(())
}
