//! The ledger worker: the Kafka loop around the pure state machine.
//!
//! It reads the partitions of `gpuledger.ledger` the consumer group gives
//! this instance (all of them when it runs alone; see [`membership`]) and
//! folds each into its own [`Ledger`]. Decisions (and dead letters for rejected events) go out
//! in one Kafka transaction per partition and batch, together with the
//! consumed offsets (`send_offsets_to_transaction`), so a crash never loses
//! or repeats a decision: on restart each partition is replayed silently up
//! to its committed offset to rebuild the state, then processing resumes.
//!
//! Each partition's transactions run on a thread of its own
//! ([`transactions`]), so events keep being read and decided while one
//! commits. Callers of this process are answered as soon as their event is
//! decided ([`AnswerAt::Decided`]): a decision is a pure function of the
//! ledger up to its cause, and the cause is already durable in the ledger
//! when it is read, so the decision committed later — by this run, or by
//! the replay after a crash — is the one answered.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use gpuledger_common::history::HistoryRoot;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use gpuledger_common::kafka::{EventProducer, KafkaArgs, PRODUCER_SETTINGS, header_text};
use gpuledger_common::shutdown::Shutdown;
use gpuledger_schemas::events::Clock;
use gpuledger_schemas::{Codec, EVENT_ID_HEADER, Envelope, Event, Timestamp, Topic};
use rdkafka::Message;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::OwnedMessage;
use rdkafka::producer::{FutureProducer, Producer};

mod ahead;
mod batches;
mod membership;
mod transactions;

use ahead::too_far_ahead;
use batches::Batches;

use membership::{Change, Membership};
use transactions::{InFlight, Transactions};

use crate::answers::Waiters;
use crate::applied::AppliedOffsets;
use crate::burst_hook::BurstHook;
use crate::history::ledger::LedgerHistory;
use crate::ledger::{Ledger, LedgerConfig, Outcome, Position, Rejection};
use crate::{Error, Result, metrics};

/// Settings of the ledger worker.
#[derive(Debug, Clone)]
pub struct LedgerWorkerConfig {
    pub kafka: KafkaArgs,
    /// Consumer group; also the stem of each partition's `transactional.id`.
    pub group_id: String,
    /// Static membership in the group (`group.instance.id`).
    pub group_instance_id: Option<String>,
    pub ledger: LedgerConfig,
    /// Events per transaction at most.
    pub max_batch: usize,
    /// How long a batch may wait to fill, from its first event: the most
    /// a decision waits for others to share its transaction.
    pub linger: Duration,
    /// How often to append a `Clock` event for every known pool, so timers
    /// fire when nothing else happens; `None` when time is owned elsewhere
    /// (a simulator, a test, or a historical ledger fed through the API).
    pub clock_interval: Option<Duration>,
    /// Cluster name on the `Clock` events.
    pub cluster: String,
    /// Events further ahead of their record's Kafka timestamp than this go
    /// to the DLQ ([`too_far_ahead`]); `None`: no such check.
    pub max_ahead: Option<Duration>,
    /// Where partition snapshots are kept; `None` replays from offset 0.
    pub state_dir: Option<PathBuf>,
    /// Write a partition's snapshot after this many events (and on shutdown).
    pub snapshot_every: u64,
    /// Where `ledger_events`, `decisions` and `allocations` are written;
    /// `None` writes no history.
    pub history_root: Option<HistoryRoot>,
    /// How long history rows may wait before they are written.
    pub history_flush: Duration,
    /// Told of every committed `BurstTriggered` decision.
    pub burst_hook: Option<BurstHook>,
    /// Callers of this process waiting for decisions.
    pub waiters: Option<Waiters>,
    /// When those callers are answered.
    pub answer: AnswerAt,
    /// Told of every record decided since this start, for callers pacing
    /// their appends.
    pub applied: Option<AppliedOffsets>,
}

/// When a caller of this process waiting for a decision is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum AnswerAt {
    /// As soon as the state machine has decided: the decision is a function
    /// of the durable ledger, so the one committed is the one answered.
    #[default]
    Decided,
    /// Once the transaction holding the decision has committed.
    Committed,
}

/// What one consumed record produces.
enum Output {
    Decision(Arc<Event>),
    DeadLetter {
        original: OwnedMessage,
        reason: String,
    },
}

/// Every partition's state machine, readable by the control API.
pub type SharedLedgers = Arc<RwLock<BTreeMap<i32, Ledger>>>;

/// One partition: its transaction thread, what it decided since the last
/// batch was handed over, and the offset below which records were already
/// decided before this start.
struct PartitionWorker {
    transactions: Transactions,
    since_snapshot: u64,
    replay_until: i64,
    /// Outputs of the events applied since the last batch was handed over.
    pending: Vec<Output>,
    /// How many events those are.
    uncommitted: usize,
    /// The offset after the last of them.
    next_offset: Option<i64>,
}

const TXN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the worker waits for an event when no batch is open, before it
/// looks at the history files' flush policy.
const IDLE_POLL: Duration = Duration::from_millis(100);

/// Runs until shutdown.
///
/// A failure of the Kafka client (a broker restart can leave a transaction
/// unable to commit, or the transaction coordinator not yet loaded when
/// the producers are made) restarts the worker from the committed offsets
/// and snapshots, exactly as a new process would start, after a growing
/// pause; nothing decided is lost or repeated, since decisions are only
/// ever visible with their committed offsets. Other errors end it.
pub async fn run(
    config: &LedgerWorkerConfig,
    ledgers: SharedLedgers,
    mut shutdown: Shutdown,
) -> Result<()> {
    const FIRST_PAUSE: Duration = Duration::from_secs(1);
    const LONGEST_PAUSE: Duration = Duration::from_secs(30);
    let mut pause = FIRST_PAUSE;
    loop {
        let started = tokio::time::Instant::now();
        match run_once(config, ledgers.clone(), shutdown.clone()).await {
            Err(e @ (Error::Client(_) | Error::Kafka(_))) if !shutdown.is_requested() => {
                if started.elapsed() > LONGEST_PAUSE * 2 {
                    pause = FIRST_PAUSE;
                }
                tracing::warn!(
                    error = %e,
                    ?pause,
                    "ledger worker stopped on a Kafka error; restarting from the committed offsets"
                );
                metrics::LEDGER_WORKER_RESTARTS.inc();
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = shutdown.wait() => return Ok(()),
                }
                pause = (pause * 2).min(LONGEST_PAUSE);
            }
            other => return other,
        }
    }
}

/// One run of the worker, from the committed offsets until shutdown or
/// the first error.
async fn run_once(
    config: &LedgerWorkerConfig,
    ledgers: SharedLedgers,
    mut shutdown: Shutdown,
) -> Result<()> {
    let topic = config.kafka.topic(Topic::Ledger);
    let mut settings = vec![
        ("group.id", config.group_id.as_str()),
        ("client.id", "gpuledger-processor-ledger"),
        ("enable.auto.commit", "false"),
        ("isolation.level", "read_committed"),
        ("auto.offset.reset", "earliest"),
        // Eager: a partition is given up everywhere before it is handed
        // out again (see `membership`).
        ("partition.assignment.strategy", "roundrobin"),
        // How long a vanished instance keeps its partitions.
        ("session.timeout.ms", "10000"),
    ];
    if let Some(id) = &config.group_instance_id {
        settings.push(("group.instance.id", id));
    }
    let (completions_tx, mut completions) = tokio::sync::mpsc::unbounded_channel();
    let context = transactions::Context {
        topic: topic.clone(),
        dlq_topic: config.kafka.topic(Topic::Dlq),
        topic_prefix: config.kafka.topic_prefix.clone(),
        state_dir: config.state_dir.clone(),
        in_flight: InFlight::default(),
        completions: completions_tx,
        runtime: tokio::runtime::Handle::current(),
    };
    let consumer: StreamConsumer<Membership> = config
        .kafka
        .client_config(&settings)?
        .create_with_context(Membership::new(config, &topic, context))?;
    // A clear error for a topic that is not there, rather than waiting.
    let partitions = partitions_of(&consumer, &topic)?;
    let mut history = match &config.history_root {
        Some(root) => Some(LedgerHistory::open(root, &topic)?),
        None => None,
    };
    let mut workers: BTreeMap<i32, PartitionWorker> = BTreeMap::new();
    if let Ok(mut map) = ledgers.write() {
        map.clear();
    }
    consumer.subscribe(&[&topic])?;
    tracing::info!(%topic, partitions = partitions.len(), group = %config.group_id, "ledger worker started");

    let codec = Codec::builtin();
    // When the batch being filled must be handed to its transaction.
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut clock = ClockTicks::new(config)?;
    let batches = Batches {
        consumer: &consumer,
        topic: &topic,
        config,
        ledgers: &ledgers,
    };
    loop {
        // A partition whose batch is full while its previous one commits
        // holds the reading back until that commit ends.
        let backlogged = workers
            .values()
            .any(|w| w.uncommitted >= config.max_batch && w.transactions.busy());
        let received = tokio::select! {
            _ = shutdown.wait() => break,
            Some(committed) = completions.recv() => {
                // What the partition gathered meanwhile goes next.
                if let Some(partition) = batches.finished(committed, &mut workers)?
                    && let Some(worker) = workers.get_mut(&partition)
                {
                    batches.hand_over(partition, worker, &mut history, false)?;
                }
                continue;
            }
            _ = clock.due() => {
                let pools: BTreeSet<String> = ledgers
                    .read()
                    .map(|map| map.values().flat_map(|l| l.pools().map(str::to_owned)).collect())
                    .unwrap_or_default();
                clock.tick(&pools, &config.cluster).await?;
                continue;
            }
            r = tokio::time::timeout_at(
                deadline.unwrap_or_else(|| tokio::time::Instant::now() + IDLE_POLL),
                consumer.recv(),
            ), if !backlogged => r,
        };
        // Rebalances run inside the receive: act on them before anything
        // is committed or written.
        for change in consumer.context().take() {
            match change {
                Change::Assigned(prepared) => {
                    for p in prepared {
                        if let Some(history) = history.as_mut() {
                            history.adopted(p.partition, p.frontier);
                        }
                        if let Ok(mut map) = ledgers.write() {
                            map.insert(p.partition, p.ledger);
                        }
                        workers.insert(p.partition, p.worker);
                    }
                }
                Change::Revoked(partitions) => {
                    for partition in partitions {
                        workers.remove(&partition);
                        if let Some(applied) = &config.applied {
                            applied.released(partition);
                        }
                        if let Some(history) = history.as_mut() {
                            history.release(partition)?;
                        }
                        if let Ok(mut map) = ledgers.write() {
                            map.remove(&partition);
                        }
                    }
                }
                Change::Failed(e) => return Err(e),
            }
        }
        match received {
            Ok(Ok(message)) => {
                let partition = message.partition();
                let offset = message.offset();
                let Some(worker) = workers.get_mut(&partition) else {
                    continue;
                };
                let position = Position { partition, offset };
                let decoded = codec.decode(message.payload().unwrap_or_default());
                let appended = message.timestamp().to_millis();
                let apply = |event: &Event| {
                    if let Some(reason) = too_far_ahead(event, appended, config.max_ahead) {
                        return Ok(Outcome::Rejected { reason });
                    }
                    let mut map = ledgers
                        .write()
                        .map_err(|_| Error::Ledger("the ledger state lock is poisoned".into()))?;
                    let ledger = map
                        .entry(partition)
                        .or_insert_with(|| Ledger::new(config.ledger));
                    Ok::<_, Error>(ledger.apply(position, event))
                };
                if offset < worker.replay_until {
                    // Decided before this start: rebuild state (and history
                    // not yet written), emit nothing.
                    if let Ok(event) = decoded {
                        let outcome = apply(&event)?;
                        record_history(&mut history, position, &event, &outcome)?;
                    }
                    continue;
                }
                let outcome = match &decoded {
                    Ok(event) => {
                        let outcome = apply(event)?;
                        record_history(&mut history, position, event, &outcome)?;
                        outcome
                    }
                    Err(e) => Outcome::Rejected {
                        reason: Rejection::Invalid(e.clone()),
                    },
                };
                let answered_from = worker.pending.len();
                match outcome {
                    Outcome::Applied {
                        decisions,
                        warnings,
                        ..
                    } => {
                        metrics::LEDGER_EVENTS_APPLIED.inc();
                        for warning in warnings {
                            tracing::warn!(partition, offset, %warning, "ledger warning");
                        }
                        worker
                            .pending
                            .extend(decisions.into_iter().map(Output::Decision));
                    }
                    Outcome::Duplicate => metrics::LEDGER_EVENTS_DUPLICATE.inc(),
                    Outcome::Rejected { reason } => {
                        metrics::LEDGER_EVENTS_REJECTED.inc();
                        tracing::warn!(partition, offset, %reason, "ledger event rejected; sent to the DLQ");
                        worker.pending.push(Output::DeadLetter {
                            original: message.detach(),
                            reason: reason.to_string(),
                        });
                    }
                }
                if config.answer == AnswerAt::Decided {
                    answer(config, &worker.pending[answered_from..]);
                }
                if let Some(applied) = &config.applied {
                    applied.applied(partition, offset);
                }
                worker.next_offset = Some(offset + 1);
                worker.since_snapshot += 1;
                worker.uncommitted += 1;
                // Once the deadline has passed, the next receive still takes
                // what is already waiting (the timeout polls it first), so
                // the batch commits as soon as nothing more is at hand.
                deadline.get_or_insert_with(|| tokio::time::Instant::now() + config.linger);
                if worker.uncommitted >= config.max_batch {
                    batches.hand_over(partition, worker, &mut history, false)?;
                }
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "ledger consumer error; retrying"),
            Err(_idle) => {
                for (&partition, worker) in workers.iter_mut() {
                    batches.hand_over(partition, worker, &mut history, false)?;
                }
                deadline = None;
                if let Some(history) = &mut history {
                    for &partition in workers.keys() {
                        if history.due(partition, config.history_flush) {
                            history.flush(partition)?;
                        }
                    }
                }
            }
        }
    }
    // The transactions in flight end first; then what is left commits with
    // a final snapshot.
    batches.drain(&mut completions, &mut workers).await?;
    for (&partition, worker) in workers.iter_mut() {
        batches.hand_over(partition, worker, &mut history, true)?;
    }
    batches.drain(&mut completions, &mut workers).await?;
    if let Some(history) = &mut history {
        history.flush_all()?;
    }
    tracing::info!("ledger worker stopped");
    Ok(())
}

/// Hands decisions and rejections to the callers of this process waiting
/// for them.
fn answer(config: &LedgerWorkerConfig, outputs: &[Output]) {
    let Some(waiters) = &config.waiters else {
        return;
    };
    for output in outputs {
        match output {
            Output::Decision(event) => waiters.decided(event),
            Output::DeadLetter { original, reason } => {
                if let Some(event_id) = header_text(original, EVENT_ID_HEADER) {
                    waiters.rejected(&event_id, reason);
                }
            }
        }
    }
}

/// Tells the metrics and the burst hook (and the waiters, when they wait
/// for commits) about outputs just committed; returns how many were
/// decisions.
fn announce(config: &LedgerWorkerConfig, outputs: Vec<Output>) -> u64 {
    use gpuledger_schemas::EventBody;
    if config.answer == AnswerAt::Committed {
        answer(config, &outputs);
    }
    let mut decisions = 0;
    for output in outputs {
        match output {
            Output::Decision(event) => {
                decisions += 1;
                match &event.body {
                    EventBody::BudgetAlert(alert) => metrics::BUDGET_ALERTS.inc(&[
                        &alert.tenant,
                        &alert.pool,
                        &alert.threshold_pct.to_string(),
                    ]),
                    EventBody::BurstTriggered(_) => {
                        if let Some(hook) = &config.burst_hook {
                            hook.notify(Arc::unwrap_or_clone(event));
                        }
                    }
                    _ => {}
                }
            }
            Output::DeadLetter { .. } => {}
        }
    }
    decisions
}

/// The processor's own ticks: a `Clock` event per pool on a period.
struct ClockTicks {
    interval: Option<tokio::time::Interval>,
    producer: Option<EventProducer>,
}

impl ClockTicks {
    fn new(config: &LedgerWorkerConfig) -> Result<Self> {
        let Some(period) = config.clock_interval else {
            return Ok(Self {
                interval: None,
                producer: None,
            });
        };
        let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        Ok(Self {
            interval: Some(interval),
            producer: Some(EventProducer::new(
                &config.kafka,
                "gpuledger-processor-clock",
            )?),
        })
    }

    /// Resolves when a tick is due; never when ticks are off.
    async fn due(&mut self) {
        match self.interval.as_mut() {
            Some(interval) => {
                interval.tick().await;
            }
            None => std::future::pending().await,
        }
    }

    async fn tick(&mut self, pools: &BTreeSet<String>, cluster: &str) -> Result<()> {
        let Some(producer) = self.producer.as_mut() else {
            return Ok(());
        };
        let now = Timestamp::now();
        for pool in pools {
            let event = Event::new(
                Envelope {
                    event_id: format!("clock-{pool}-{}", now.as_micros()).into(),
                    event_time: now,
                    source: "gpuledger-processor".into(),
                    cluster: cluster.into(),
                },
                Clock {
                    pool: pool.clone(),
                    now: Some(now),
                },
            );
            producer.send(&event).await?;
        }
        producer.flush(Duration::from_secs(30)).await?;
        Ok(())
    }
}

fn transactional_producer(config: &LedgerWorkerConfig, partition: i32) -> Result<FutureProducer> {
    let transactional_id = format!("{}-ledger-{partition}", config.group_id);
    let mut settings = PRODUCER_SETTINGS.to_vec();
    settings.push(("transactional.id", &transactional_id));
    // At least the producer's message timeout, as librdkafka requires.
    settings.push(("transaction.timeout.ms", "120000"));
    settings.push(("client.id", "gpuledger-processor-decisions"));
    // The commit waits for the decisions anyway; lingering only delays it.
    settings.push(("linger.ms", "0"));
    let producer: FutureProducer = config.kafka.client_config(&settings)?.create()?;
    // Fences any older instance holding the same id and aborts what it left open.
    producer.init_transactions(TXN_TIMEOUT)?;
    Ok(producer)
}

/// The partition ids of `topic`; an error when it has none (or does not exist).
pub(crate) fn partitions_of<X: rdkafka::consumer::ConsumerContext, C: Consumer<X>>(
    consumer: &C,
    topic: &str,
) -> Result<Vec<i32>> {
    Ok(gpuledger_common::kafka::partitions_of(
        consumer.client(),
        topic,
    )?)
}

/// Buffers the history rows of one applied event; other outcomes only
/// extend the range of the next file.
fn record_history(
    history: &mut Option<LedgerHistory>,
    position: Position,
    event: &Event,
    outcome: &Outcome,
) -> Result<()> {
    let Some(history) = history else {
        return Ok(());
    };
    match outcome {
        Outcome::Applied {
            decisions,
            segments,
            ..
        } => history.push(
            position.partition,
            position.offset,
            event,
            decisions,
            segments,
        ),
        _ => {
            history.skip(position.partition, position.offset);
            Ok(())
        }
    }
}
