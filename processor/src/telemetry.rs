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
//!
//! Threads do the work, none of them on the async runtime: the consumer
//! reads records a batch at a time ([`BatchReader`]) and each sample
//! straight into its partition's columns, and two file writers, each with
//! the files of half the partitions, sort, roll up and write the batches
//! the consumer hands them, a partition's in order, storing each file's
//! offsets once it is durable. The consumer reads on while files are
//! written; it waits only when a writer already has two files queued.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use gpuledger_common::history::HistoryRoot;
use gpuledger_common::kafka::{DeadLetters, KafkaArgs};
use gpuledger_common::shutdown::Shutdown;
use gpuledger_schemas::{Codec, EventBody, SampleRecord, Topic};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};

use crate::batch_reader::BatchReader;
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

/// When the writer stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// On shutdown: the streaming writer of `run`, a member of its group.
    Shutdown,
    /// Once every partition of the topic has been read to the end it had
    /// when reached, or on shutdown: `catch-up`, a batch load. It reads
    /// every partition itself (no group membership) from the group's
    /// committed offsets, and refuses to start while the group has members.
    TopicEnd,
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
    pub until: Until,
}

/// Threads writing files, each the files of every `FILE_WRITERS`th
/// partition: sorting, rolling up and encoding a file take about as long
/// as reading its records.
const FILE_WRITERS: usize = 2;

/// Files handed to a writer and not yet durable, at most: the consumer
/// reads on while they are written, and waits beyond.
const QUEUED_FILES: usize = 2;

/// How long one read waits for records before the consumer looks at the
/// clock (rolling by age) and at shutdown.
const POLL: Duration = Duration::from_millis(100);

/// Records between two looks at the clock while records keep coming.
const CLOCK_EVERY: usize = 4096;

/// What a writer took in, all of it durable once [`run`] returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Ingested {
    /// Rows written to `samples`.
    pub samples: u64,
    /// `samples` files written.
    pub files: u64,
    /// Records sent to the DLQ.
    pub dead_letters: u64,
}

/// Runs until shutdown, or until the topic's end (see [`Until`]):
/// consume, buffer, roll files, commit.
pub async fn run(config: &TelemetryWriterConfig, shutdown: Shutdown) -> Result<Ingested> {
    let config = config.clone();
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let (consumption, reader) = Consumption::start(&config, runtime)?;
        consumption.run(reader, &shutdown)
    })
    .await
    .map_err(|e| Error::History(format!("the telemetry consumer stopped: {e}")))?
}

/// What the consumer keeps of one partition.
#[derive(Debug)]
struct PartitionState {
    taken: i64,
    buffer: PartitionBuffer,
    /// Read to the end the partition had then, with no record since.
    at_end: bool,
}

impl Default for PartitionState {
    fn default() -> Self {
        Self {
            taken: -1,
            buffer: PartitionBuffer::default(),
            at_end: false,
        }
    }
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

impl PartitionBuffer {
    fn note_offset(&mut self, offset: i64) {
        self.first_offset.get_or_insert(offset);
        self.last_offset = offset;
    }
}

/// A partition's rows on their way to becoming a file.
struct PendingFile {
    name: FileName,
    date: String,
    /// `None` when every record of the range went to the DLQ: there is no
    /// file to write, only offsets to store.
    batch: Option<RecordBatch>,
}

/// The consumer's side: polling, reading, buffering.
struct Consumption {
    consumer: Arc<BaseConsumer>,
    topic: String,
    codec: &'static Codec,
    dead_letters: DeadLetters,
    runtime: tokio::runtime::Handle,
    rolling: RollingPolicy,
    until: Until,
    /// The partitions read, where `until` is [`Until::TopicEnd`].
    assigned: Vec<i32>,
    ingested: Ingested,
    /// Per partition id: the highest offset taken (in a file, buffered or
    /// sent to the DLQ; a record at or below it is one seen before) and the
    /// rows buffered.
    partitions: Vec<PartitionState>,
    /// The file writers' queues and threads; a partition's files all go
    /// to the same one, in order.
    files: Vec<SyncSender<PendingFile>>,
    writers: Vec<std::thread::JoinHandle<Result<()>>>,
}

impl Consumption {
    /// Subscribes, cleans up what a crash left and starts the file writer;
    /// returns it with the reader of the records the consumer fetches.
    fn start(
        config: &TelemetryWriterConfig,
        runtime: tokio::runtime::Handle,
    ) -> Result<(Self, BatchReader)> {
        let topic = config.kafka.topic(Topic::Telemetry);
        let mut settings = vec![
            ("group.id", config.group_id.as_str()),
            // A crashed member holds its partitions until its session
            // times out; keep that short so a restart resumes within
            // seconds.
            ("session.timeout.ms", "10000"),
            ("heartbeat.interval.ms", "2000"),
            ("client.id", "gpuledger-processor-telemetry"),
            ("enable.auto.commit", "true"),
            ("auto.commit.interval.ms", "1000"),
            ("enable.auto.offset.store", "false"),
            ("auto.offset.reset", "earliest"),
            ("isolation.level", "read_committed"),
            // Notice topics (and partitions) created after start within
            // seconds.
            ("topic.metadata.refresh.interval.ms", "5000"),
            // librdkafka stops fetching a partition whose local queue is
            // past `queued.min.messages` and, by default, waits a whole
            // second before it fetches again: a consumer that empties its
            // queue in a few milliseconds then idles most of the time.
            ("fetch.queue.backoff.ms", "10"),
        ];
        let instance = config
            .group_instance_id
            .as_ref()
            .map(|id| format!("{id}-telemetry"));
        match config.until {
            Until::Shutdown => {
                if let Some(id) = &instance {
                    settings.push(("group.instance.id", id));
                }
            }
            Until::TopicEnd => settings.push(("enable.partition.eof", "true")),
        }
        let consumer: Arc<BaseConsumer> =
            Arc::new(config.kafka.client_config(&settings)?.create()?);
        // Records of the partitions known now are routed to the batch
        // reader before any is fetched; those of a topic made later are
        // routed as they first arrive.
        let known = match gpuledger_common::kafka::partitions_of(consumer.client(), &topic) {
            Ok(known) => known,
            // A batch load of a topic that is not there is a mistake to
            // report; a streaming writer waits for the topic.
            Err(e) if config.until == Until::TopicEnd => return Err(e.into()),
            Err(_) => Vec::new(),
        };
        let reader = BatchReader::new(consumer.clone(), &topic, &known)?;
        let assigned = match config.until {
            Until::Shutdown => {
                consumer.subscribe(&[&topic])?;
                Vec::new()
            }
            Until::TopicEnd => {
                ensure_no_members(&consumer, &config.group_id)?;
                if known.is_empty() {
                    return Err(Error::Consumer(format!("topic {topic} has no partitions")));
                }
                consumer.assign(&resume_points(&consumer, &topic, &known)?)?;
                known
            }
        };
        let dead_letters = DeadLetters::new(&config.kafka, "gpuledger-processor-dlq")?;
        let root = &config.history_root;
        let leftovers = remove_leftovers(root, samples::TABLE, None)?
            + remove_leftovers(root, hourly::TABLE, None)?;
        if leftovers > 0 {
            tracing::info!(
                leftovers,
                "removed temporary files of writes a crash interrupted"
            );
        }
        let durable = durable_offsets(root, samples::TABLE, &topic)?;
        let orphans = remove_beyond(root, hourly::TABLE, &topic, &durable, None)?;
        if orphans > 0 {
            tracing::info!(
                orphans,
                "removed roll-ups whose samples file a crash prevented"
            );
        }
        let mut files = Vec::with_capacity(FILE_WRITERS);
        let mut writers = Vec::with_capacity(FILE_WRITERS);
        for _ in 0..FILE_WRITERS {
            let (sender, queue) = std::sync::mpsc::sync_channel(QUEUED_FILES);
            let writer = FileWriter {
                consumer: consumer.clone(),
                topic: topic.clone(),
                root: root.clone(),
            };
            files.push(sender);
            writers.push(
                std::thread::Builder::new()
                    .name("telemetry-files".to_owned())
                    .spawn(move || writer.run(&queue))?,
            );
        }
        tracing::info!(%topic, %root, "telemetry writer started");
        let mut consumption = Self {
            consumer,
            topic,
            codec: Codec::builtin(),
            dead_letters,
            runtime,
            rolling: config.rolling,
            until: config.until,
            assigned,
            ingested: Ingested::default(),
            partitions: Vec::new(),
            files,
            writers,
        };
        for (partition, offset) in durable {
            consumption.state(partition).taken = offset;
        }
        Ok((consumption, reader))
    }

    /// A partition's state, made on first sight.
    fn state(&mut self, partition: i32) -> &mut PartitionState {
        // Partition ids count from 0; a negative one is never delivered.
        let index = usize::try_from(partition).unwrap_or_default();
        if index >= self.partitions.len() {
            self.partitions
                .resize_with(index + 1, PartitionState::default);
        }
        &mut self.partitions[index]
    }

    /// Reads until shutdown (or the topic's end), then writes what is
    /// buffered and commits.
    fn run(mut self, mut reader: BatchReader, shutdown: &Shutdown) -> Result<Ingested> {
        let mut polled = 0usize;
        // A record borrows the consumer it came from, not the rest of us.
        let consumer = self.consumer.clone();
        loop {
            // A partition reached its end in this round: look whether all
            // have, rather than wait for a read to come back empty.
            let mut ended = false;
            // The consumer's own queue first, emptied: rebalances, errors,
            // and records of partitions not yet routed to the reader, which
            // come before any of theirs the reader holds.
            while let Some(polled_one) = consumer.poll(Duration::ZERO) {
                match polled_one {
                    Ok(message) => {
                        reader.route(message.partition())?;
                        self.take(&message)?;
                        polled += 1;
                    }
                    Err(KafkaError::PartitionEOF(partition)) => {
                        self.state(partition).at_end = true;
                        ended = true;
                    }
                    Err(e) => tracing::warn!(error = %e, "telemetry consumer error; retrying"),
                }
            }
            let read = reader.read(POLL, |record| {
                if record.is_partition_end() {
                    self.state(record.partition()).at_end = true;
                    ended = true;
                    return Ok(());
                }
                match record.error() {
                    None => self.take(record),
                    Some(e) => {
                        tracing::warn!(error = %e, "telemetry consumer error; retrying");
                        Ok(())
                    }
                }
            })?;
            polled += read;
            if read > 0 && polled < CLOCK_EVERY && !ended {
                continue;
            }
            metrics::TELEMETRY_RECORDS_POLLED.add(polled as u64);
            polled = 0;
            if shutdown.is_requested() || self.read_to_end() {
                break;
            }
            self.roll_aged()?;
        }
        for partition in 0..self.partitions.len() {
            self.flush(partition as i32)?;
        }
        self.finish_writing()?;
        if let Err(e) = self.consumer.commit_consumer_state(CommitMode::Sync) {
            // Nothing consumed yet is not a failure.
            tracing::debug!(error = %e, "final commit");
        }
        tracing::info!(
            samples = self.ingested.samples,
            files = self.ingested.files,
            "telemetry writer stopped"
        );
        Ok(self.ingested)
    }

    /// Whether the writer reads to the topic's end and every partition has
    /// reached it.
    fn read_to_end(&self) -> bool {
        self.until == Until::TopicEnd
            && self.assigned.iter().all(|&partition| {
                usize::try_from(partition)
                    .ok()
                    .and_then(|index| self.partitions.get(index))
                    .is_some_and(|state| state.at_end)
            })
    }

    /// One record: into its partition's columns, or to the DLQ.
    fn take(&mut self, message: &impl Message) -> Result<()> {
        let partition = message.partition();
        let offset = message.offset();
        let state = self.state(partition);
        state.at_end = false;
        if offset <= state.taken {
            return Ok(());
        }
        state.taken = offset;
        let payload = message.payload().unwrap_or_default();
        // Nearly every record is a v1 sample read in place; anything else
        // is decoded whole, which also explains what is wrong with it.
        if let Some(record) = self.codec.read_sample(payload) {
            return match record.validate() {
                Ok(()) => self.push(partition, offset, &record),
                Err(e) => self.dead_letter(message, &e.to_string()),
            };
        }
        let event = match self
            .codec
            .decode(payload)
            .and_then(|event| event.validate().map(|()| event))
        {
            Ok(event) => event,
            Err(e) => return self.dead_letter(message, &e.to_string()),
        };
        match &event.body {
            EventBody::GpuSample(sample) => self.push(
                partition,
                offset,
                &SampleRecord::of(&event.envelope, sample),
            ),
            _ => {
                let reason = format!(
                    "{} does not belong on {}",
                    event.event_type().name(),
                    self.topic
                );
                self.dead_letter(message, &reason)
            }
        }
    }

    /// Appends a valid sample to its partition's buffer, rolling the
    /// buffer first when the sample starts a new day and after it when
    /// the buffer is full.
    fn push(&mut self, partition: i32, offset: i64, record: &SampleRecord<'_>) -> Result<()> {
        let day = record.event_time.day();
        let buffer = &self.state(partition).buffer;
        if !buffer.rows.is_empty() && buffer.day != day {
            self.flush(partition)?;
        }
        let max_rows = self.rolling.max_rows;
        let buffer = &mut self.state(partition).buffer;
        if buffer.rows.is_empty() {
            buffer.day = day;
            buffer.date = record.event_time.date_string();
        }
        buffer.rows.push(record);
        buffer.note_offset(offset);
        buffer.opened.get_or_insert_with(Instant::now);
        if buffer.rows.len() >= max_rows {
            self.flush(partition)?;
        }
        Ok(())
    }

    /// Sends a record to the DLQ, counted, and takes its offset: it is
    /// stored with the rows around it.
    fn dead_letter(&mut self, message: &impl Message, reason: &str) -> Result<()> {
        let (partition, offset) = (message.partition(), message.offset());
        metrics::TELEMETRY_DEAD_LETTERS.inc();
        self.ingested.dead_letters += 1;
        tracing::warn!(partition, offset, %reason, "telemetry record sent to the DLQ");
        self.runtime
            .block_on(self.dead_letters.send(message, reason))?;
        let buffer = &mut self.state(partition).buffer;
        buffer.note_offset(offset);
        buffer.opened.get_or_insert_with(Instant::now);
        Ok(())
    }

    /// Rolls every buffer whose oldest row waited past the policy's age.
    fn roll_aged(&mut self) -> Result<()> {
        for partition in 0..self.partitions.len() {
            let opened = self.partitions[partition].buffer.opened;
            if opened.is_some_and(|t| t.elapsed() >= self.rolling.max_age) {
                self.flush(partition as i32)?;
            }
        }
        Ok(())
    }

    /// Hands a partition's buffer to the file writer.
    fn flush(&mut self, partition: i32) -> Result<()> {
        let mut buffer = std::mem::take(&mut self.state(partition).buffer);
        let Some(first_offset) = buffer.first_offset else {
            return Ok(());
        };
        let batch = if buffer.rows.is_empty() {
            None
        } else {
            Some(
                buffer
                    .rows
                    .finish()
                    .map_err(|e| Error::History(e.to_string()))?,
            )
        };
        // The emptied columns keep room for a file like this one.
        self.state(partition).buffer.rows = std::mem::take(&mut buffer.rows);
        if let Some(batch) = &batch {
            self.ingested.samples += batch.num_rows() as u64;
            self.ingested.files += 1;
        }
        let file = PendingFile {
            name: FileName {
                topic: self.topic.clone(),
                partition,
                first_offset,
                last_offset: buffer.last_offset,
            },
            date: std::mem::take(&mut buffer.date),
            batch,
        };
        // Partition ids count from 0; a negative one is never delivered.
        let writer = usize::try_from(partition).unwrap_or_default() % FILE_WRITERS;
        let sent = self.files.get(writer).is_some_and(|f| f.send(file).is_ok());
        if !sent {
            // The writer stopped on an error: that error is the answer.
            self.finish_writing()?;
            return Err(Error::History("the telemetry file writer stopped".into()));
        }
        Ok(())
    }

    /// Waits for every queued file to be durable; the writer's error, if
    /// it stopped on one.
    fn finish_writing(&mut self) -> Result<()> {
        self.files.clear();
        let mut result = Ok(());
        for writer in self.writers.drain(..) {
            let done = writer
                .join()
                .map_err(|_| Error::History("a telemetry file writer panicked".into()))
                .and_then(|done| done);
            if result.is_ok() {
                result = done;
            }
        }
        result
    }
}

/// Refuses to go on while `group` has members: a writer reading every
/// partition beside them would write the same records into files of its
/// own.
fn ensure_no_members(consumer: &BaseConsumer, group: &str) -> Result<()> {
    let groups = consumer.fetch_group_list(Some(group), Duration::from_secs(30))?;
    let members: usize = groups
        .groups()
        .iter()
        .filter(|g| g.name() == group)
        .map(|g| g.members().len())
        .sum();
    if members > 0 {
        return Err(Error::Consumer(format!(
            "consumer group {group} has {members} active member(s): stop the `run` of this \
             group before catching up"
        )));
    }
    Ok(())
}

/// Where a batch load resumes in each of `partitions`: the group's
/// committed offset, else the earliest. Asked here, and asked again while
/// the group's coordinator cannot answer, rather than left to the
/// assignment: librdkafka asks once, and where a coordinator still loading
/// (a broker just started) refuses that request it never asks again, so
/// the partitions are never read (librdkafka issue #5586).
fn resume_points(
    consumer: &BaseConsumer,
    topic: &str,
    partitions: &[i32],
) -> Result<TopicPartitionList> {
    let mut asked = TopicPartitionList::new();
    for &partition in partitions {
        asked.add_partition(topic, partition);
    }
    let mut tries = 0u32;
    let committed = loop {
        let answer = consumer
            .committed_offsets(asked.clone(), Duration::from_secs(10))
            .and_then(|list| {
                let refused = list.elements().iter().find_map(|e| e.error().err());
                refused.map_or(Ok(list), Err)
            });
        match answer {
            Ok(list) => break list,
            Err(e) if tries < RESUME_TRIES => {
                tries += 1;
                tracing::warn!(error = %e, tries, "committed offsets not read; asking again");
                std::thread::sleep(Duration::from_millis(500) * tries);
            }
            Err(e) => return Err(e.into()),
        }
    };
    let mut points = TopicPartitionList::new();
    for e in committed.elements() {
        let offset = match e.offset() {
            Offset::Offset(next) if next >= 0 => Offset::Offset(next),
            _ => Offset::Beginning,
        };
        points.add_partition_offset(topic, e.partition(), offset)?;
    }
    Ok(points)
}

/// How many times a batch load asks again for the committed offsets
/// before it gives up (waiting half a second longer each time: some 40
/// seconds in all, besides the requests themselves).
const RESUME_TRIES: u32 = 12;

/// The writer's side: each file sorted, rolled up, written durably, then
/// its offsets stored, one file after another.
struct FileWriter {
    consumer: Arc<BaseConsumer>,
    topic: String,
    root: HistoryRoot,
}

impl FileWriter {
    fn run(self, queue: &Receiver<PendingFile>) -> Result<()> {
        for file in queue {
            let rows = file.batch.as_ref().map_or(0, RecordBatch::num_rows);
            if let Some(arrived) = file.batch {
                let history = |e: arrow::error::ArrowError| Error::History(e.to_string());
                // Sorted first: the roll-up walks each device's samples in
                // time order, which the sorted batch already is. The rows
                // as they arrived are let go at once, not kept through the
                // encoding: a batch fewer in memory per writer.
                let batch = samples::sorted(&arrived).map_err(history)?;
                drop(arrived);
                let rolled_up = hourly::roll_up(&batch).map_err(history)?;
                write_file(
                    &self.root,
                    hourly::TABLE,
                    &file.date,
                    &file.name,
                    &rolled_up,
                )?;
                write_file(&self.root, samples::TABLE, &file.date, &file.name, &batch)?;
                metrics::SAMPLES_WRITTEN.add(rows as u64);
                metrics::HISTORY_FILES_WRITTEN.inc();
                tracing::debug!(file = %file.name.render(), rows, "samples file written");
            }
            self.store_next(file.name.partition, file.name.last_offset + 1)?;
        }
        Ok(())
    }

    /// Stores `next` as the offset the group resumes `partition` from at
    /// the next commit. (Not `store_offset`: librdkafka's
    /// `rd_kafka_offset_store` stores the offset it is given plus one,
    /// which would skip a record.)
    fn store_next(&self, partition: i32, next: i64) -> Result<()> {
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&self.topic, partition, Offset::Offset(next))?;
        self.consumer.store_offsets(&list)?;
        Ok(())
    }
}
