//! Hands each partition's decided events to its transaction thread in
//! batches, with a snapshot when one is due, and takes the transactions'
//! ends back.

use std::collections::BTreeMap;

use rdkafka::consumer::{Consumer, StreamConsumer};

use super::membership::Membership;
use super::transactions::{Batch, Committed};
use super::{LedgerWorkerConfig, PartitionWorker, SharedLedgers, announce};
use crate::history::ledger::LedgerHistory;
use crate::snapshot::{HistoryMark, Snapshot};
use crate::{Error, Result, metrics};

/// Hands partitions' batches to their transactions and takes the ends back.
pub(super) struct Batches<'a> {
    pub(super) consumer: &'a StreamConsumer<Membership>,
    pub(super) topic: &'a str,
    pub(super) config: &'a LedgerWorkerConfig,
    pub(super) ledgers: &'a SharedLedgers,
}

impl Batches<'_> {
    /// Hands the partition's events since its last batch to its transaction
    /// thread, unless one is in flight (the end of that one hands over
    /// again) or there is nothing to hand.
    pub(super) fn hand_over(
        &self,
        partition: i32,
        worker: &mut PartitionWorker,
        history: &mut Option<LedgerHistory>,
        final_snapshot: bool,
    ) -> Result<()> {
        if worker.transactions.busy() {
            return Ok(());
        }
        let Some(next_offset) = worker.next_offset.take() else {
            return Ok(());
        };
        let config = self.config;
        let due = config.state_dir.is_some()
            && (worker.since_snapshot >= config.snapshot_every
                || (final_snapshot && worker.since_snapshot > 0));
        if let Some(history) = history.as_mut()
            && (due || final_snapshot || history.due(partition, config.history_flush))
        {
            // Before a snapshot: the state restored must not be ahead of
            // the history.
            history.flush(partition)?;
        }
        // The state now is the state at `next_offset`; it is saved once the
        // batch commits.
        let snapshot = match due {
            true => self
                .ledgers
                .read()
                .ok()
                .and_then(|m| m.get(&partition).cloned())
                .map(|ledger| {
                    Box::new(Snapshot {
                        topic: self.topic.to_owned(),
                        partition,
                        next_offset,
                        ledger,
                        // Flushed above: every row caused below `next_offset` is durable.
                        history: history.as_ref().map(|h| HistoryMark {
                            frontier: h.frontier(partition),
                        }),
                    })
                }),
            false => None,
        };
        if snapshot.is_some() {
            worker.since_snapshot = 0;
        }
        let group = self
            .consumer
            .group_metadata()
            .ok_or_else(|| Error::Ledger("the ledger consumer has no group metadata".into()))?;
        let history = match snapshot {
            Some(_) => history.as_ref().map(LedgerHistory::written),
            None => None,
        };
        worker.transactions.send(Batch {
            outputs: std::mem::take(&mut worker.pending),
            next_offset,
            group,
            snapshot,
            history,
        })?;
        worker.uncommitted = 0;
        Ok(())
    }

    /// A transaction ended: announces what it made visible. An error ends
    /// the worker, which restarts from the committed offsets. Returns the
    /// partition when it is still this run's, free for its next batch.
    pub(super) fn finished(
        &self,
        committed: Committed,
        workers: &mut BTreeMap<i32, PartitionWorker>,
    ) -> Result<Option<i32>> {
        let partition = committed.partition;
        let worker = workers
            .get_mut(&partition)
            .filter(|w| w.transactions.id() == committed.thread);
        let outputs = match (committed.result, worker.is_some()) {
            (Ok(outputs), _) => outputs,
            (Err(e), true) => return Err(e),
            (Err(e), false) => {
                // Given up meanwhile: the next owner decides it again.
                tracing::warn!(partition, error = %e, "transaction of a partition given up failed");
                return Ok(None);
            }
        };
        metrics::DECISIONS_EMITTED.add(announce(self.config, outputs));
        Ok(worker.map(|worker| {
            worker.transactions.done();
            partition
        }))
    }

    /// Waits until no partition has a transaction in flight.
    pub(super) async fn drain(
        &self,
        completions: &mut tokio::sync::mpsc::UnboundedReceiver<Committed>,
        workers: &mut BTreeMap<i32, PartitionWorker>,
    ) -> Result<()> {
        while workers.values().any(|w| w.transactions.busy()) {
            let Some(committed) = completions.recv().await else {
                break;
            };
            self.finished(committed, workers)?;
        }
        Ok(())
    }
}
