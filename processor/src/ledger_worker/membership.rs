//! Which ledger partitions this instance owns, as the consumer group
//! decides. Instances of one group share the partitions; a rebalance moves
//! some from one to another, and each partition's decisions stay exactly
//! once across the move:
//!
//! - **Revoked**: the transaction the partition has in flight ends first;
//!   then the loop drops the partition's uncommitted work (pending
//!   decisions, history rows not yet written) and its state. Nothing of it
//!   was committed: decisions are committed only with their offsets.
//! - **Assigned**: before the partition is consumed, its transactional
//!   producer is made (`init_transactions` fences the previous owner and
//!   aborts what it left open), the history's half-written files for it are
//!   removed, and its state comes from this instance's snapshot where that
//!   fits, otherwise from offset 0; records up to the committed offset are
//!   replayed silently.
//!
//! The group uses an eager protocol (`roundrobin`): every member gives up
//! its partitions before any is handed out again, and a rebalance callback
//! runs inside the consumer's poll, never while the loop is committing or
//! writing history, so a previous owner is done with a partition before the
//! next one starts.

use std::collections::BTreeMap;
use std::sync::Mutex;

use gpuledger_common::history::HistoryRoot;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::transactions::{Context, Transactions};
use super::{LedgerWorkerConfig, PartitionWorker, TXN_TIMEOUT, transactional_producer};
use crate::history::ledger;
use crate::ledger::Ledger;
use crate::snapshot;
use crate::{Error, Result};

/// A partition ready to be consumed from its start offset.
pub(super) struct Prepared {
    pub(super) partition: i32,
    pub(super) worker: PartitionWorker,
    pub(super) ledger: Ledger,
    /// The highest offset whose history rows are durable.
    pub(super) frontier: Option<i64>,
}

/// A change of ownership the loop has yet to act on.
pub(super) enum Change {
    Assigned(Vec<Prepared>),
    Revoked(Vec<i32>),
    /// Preparing an assigned partition failed: the worker restarts.
    Failed(Error),
}

/// The ledger consumer's context: runs the group's rebalances and queues
/// what changed for the loop.
pub(super) struct Membership {
    config: LedgerWorkerConfig,
    topic: String,
    changes: Mutex<Vec<Change>>,
    /// What the partitions' transaction threads share.
    transactions: Context,
}

impl Membership {
    pub(super) fn new(config: &LedgerWorkerConfig, topic: &str, transactions: Context) -> Self {
        Membership {
            config: config.clone(),
            topic: topic.to_owned(),
            changes: Mutex::new(Vec::new()),
            transactions,
        }
    }

    /// The changes since the last call, in order.
    pub(super) fn take(&self) -> Vec<Change> {
        self.changes
            .lock()
            .map(|mut c| std::mem::take(&mut *c))
            .unwrap_or_default()
    }

    fn push(&self, change: Change) {
        if let Ok(mut changes) = self.changes.lock() {
            changes.push(change);
        }
    }

    /// Producer, history and state of each partition in `assigned`, and the
    /// offset each is to be read from.
    fn prepare(
        &self,
        consumer: &BaseConsumer<Self>,
        assigned: &[i32],
    ) -> Result<(Vec<Prepared>, BTreeMap<i32, Offset>)> {
        let config = &self.config;
        // Producers first: until the previous owner's transaction is
        // aborted, the group's offsets are unstable and reading them would
        // wait for the transaction timeout.
        let mut producers = BTreeMap::new();
        for &partition in assigned {
            producers.insert(partition, transactional_producer(config, partition)?);
        }
        let mut list = TopicPartitionList::new();
        for &p in assigned {
            list.add_partition(&self.topic, p);
        }
        let committed: BTreeMap<i32, i64> = consumer
            .committed_offsets(list, std::time::Duration::from_secs(30))?
            .elements()
            .iter()
            .filter_map(|e| match e.offset() {
                Offset::Offset(o) => Some((e.partition(), o)),
                _ => None,
            })
            .collect();
        let mut prepared = Vec::new();
        let mut starts = BTreeMap::new();
        for (partition, producer) in producers {
            let committed_at = committed.get(&partition).copied().unwrap_or(0);
            let frontier = match &config.history_root {
                Some(root) => Some(adopt_history(root, &self.topic, partition)?),
                None => None,
            };
            let snapshot = match &config.state_dir {
                Some(dir) => snapshot::load(dir, &self.topic, partition)?,
                None => None,
            };
            // History rows are written again only from the events replayed,
            // so the state must not start past rows the history lacks.
            let (start, ledger) = match snapshot {
                Some(s) if frontier.is_some_and(|f| !s.fits_history(f)) => {
                    tracing::warn!(
                        partition,
                        next_offset = s.next_offset,
                        ?frontier,
                        "snapshot is ahead of the ledger history; replaying from 0"
                    );
                    (Offset::Beginning, Ledger::new(config.ledger))
                }
                Some(s) if s.next_offset <= committed_at => {
                    tracing::info!(
                        partition,
                        next_offset = s.next_offset,
                        committed_at,
                        "ledger state restored from snapshot"
                    );
                    (Offset::Offset(s.next_offset), s.ledger)
                }
                Some(s) => {
                    tracing::warn!(
                        partition,
                        next_offset = s.next_offset,
                        committed_at,
                        "snapshot is ahead of the committed offset; replaying from 0"
                    );
                    (Offset::Beginning, Ledger::new(config.ledger))
                }
                None => (Offset::Beginning, Ledger::new(config.ledger)),
            };
            starts.insert(partition, start);
            prepared.push(Prepared {
                partition,
                worker: PartitionWorker {
                    transactions: Transactions::spawn(
                        partition,
                        producer,
                        self.transactions.clone(),
                    )?,
                    since_snapshot: 0,
                    replay_until: committed_at,
                    pending: Vec::new(),
                    uncommitted: 0,
                    next_offset: None,
                },
                ledger,
                frontier: frontier.flatten(),
            });
        }
        Ok((prepared, starts))
    }
}

fn adopt_history(root: &HistoryRoot, topic: &str, partition: i32) -> Result<Option<i64>> {
    ledger::adopt(root, topic, partition)
}

impl ClientContext for Membership {}

impl ConsumerContext for Membership {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let partitions: Vec<i32> = tpl
            .elements_for_topic(&self.topic)
            .iter()
            .map(|e| e.partition())
            .collect();
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                // Blocking calls (producers, committed offsets, snapshot and
                // history files), inside the consumer's poll on a runtime
                // worker thread: let the runtime move its other tasks.
                let prepared = tokio::task::block_in_place(|| self.prepare(consumer, &partitions));
                match prepared {
                    Ok((prepared, starts)) => {
                        let mut list = TopicPartitionList::new();
                        for (p, start) in &starts {
                            if let Err(e) = list.add_partition_offset(&self.topic, *p, *start) {
                                self.push(Change::Failed(e.into()));
                                return;
                            }
                        }
                        if let Err(e) = consumer.assign(&list) {
                            self.push(Change::Failed(e.into()));
                            return;
                        }
                        tracing::info!(?partitions, "ledger partitions assigned");
                        self.push(Change::Assigned(prepared));
                    }
                    Err(e) => {
                        tracing::warn!(?partitions, error = %e, "could not take on the assigned ledger partitions");
                        self.push(Change::Failed(e));
                    }
                }
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                tracing::info!(?partitions, "ledger partitions revoked");
                // The next owner starts only once this one's transactions
                // in flight have ended.
                let idle = tokio::task::block_in_place(|| {
                    self.transactions
                        .in_flight
                        .wait_idle(&partitions, TXN_TIMEOUT)
                });
                if !idle {
                    tracing::warn!(
                        ?partitions,
                        "a transaction of a revoked partition is still in flight; the next owner fences it"
                    );
                }
                self.push(Change::Revoked(partitions));
                if let Err(e) = consumer.unassign() {
                    self.push(Change::Failed(e.into()));
                }
            }
            other => {
                tracing::warn!(error = ?other, "ledger consumer rebalance failed");
                if let Err(e) = consumer.unassign() {
                    self.push(Change::Failed(e.into()));
                }
            }
        }
    }
}
