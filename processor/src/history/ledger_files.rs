//! The thread that writes the ledger history's files.
//!
//! Turning a partition's buffered rows into Parquet, compressing and
//! fsyncing them takes tens of milliseconds; done on the ledger worker's
//! loop, every event behind it (an admission among them) would wait that
//! long. [`crate::history::ledger::LedgerHistory`] hands each flush here
//! instead, in order, and keeps reading. Files are written one flush after
//! another, each flush's tables in the order that keeps the marker table
//! last, so what is on disk is always what a synchronous writer would have
//! left at some moment.
//!
//! Whoever must know that rows are durable (a snapshot, a partition given
//! up, the end of a run) takes a [`Written`] ticket and waits on it.

use std::collections::BTreeMap;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use gpuledger_common::history::HistoryRoot;
use serde_json::Value;

use super::layout::FileName;
use super::sink::write_file;
use crate::{Error, Result, metrics};

/// Flushes that may wait for the thread before a new one blocks its
/// sender: the history may lag the ledger by this much, no more.
const QUEUED_FLUSHES: usize = 4;

/// One partition's buffered rows: one offset range of one UTC day.
pub(super) struct Flush {
    pub name: FileName,
    pub date: String,
    /// Rows of each table, written in the order of `tables`.
    pub rows: BTreeMap<&'static str, Vec<Value>>,
}

/// The writer thread and the progress it reports.
#[derive(Debug)]
pub(super) struct Files {
    jobs: Option<SyncSender<(u64, Flush)>>,
    thread: Option<JoinHandle<()>>,
    progress: Progress,
    /// The number of the last flush handed over.
    handed: u64,
}

/// What the thread has written, shared with those who wait for it.
#[derive(Debug, Clone, Default)]
struct Progress(Arc<(Mutex<State>, Condvar)>);

#[derive(Debug, Default)]
struct State {
    /// Flushes written, counted from 1 in the order they were handed over.
    done: u64,
    /// Why the thread stopped, if it did.
    failed: Option<String>,
}

/// A promise to be kept: every flush handed over before it was made is
/// durable once [`Written::wait`] returns `Ok`.
#[derive(Debug, Clone)]
pub struct Written {
    progress: Progress,
    flush: u64,
}

impl Written {
    /// Blocks until those flushes are on disk, or says why they never will be.
    pub fn wait(&self) -> Result<()> {
        self.progress.wait_for(self.flush)
    }
}

impl Progress {
    fn wait_for(&self, flush: u64) -> Result<()> {
        let (lock, moved) = &*self.0;
        let mut state = lock
            .lock()
            .map_err(|_| Error::History("the history progress lock is poisoned".into()))?;
        loop {
            if let Some(failed) = &state.failed {
                return Err(Error::History(format!("writing history failed: {failed}")));
            }
            if state.done >= flush {
                return Ok(());
            }
            state = moved
                .wait(state)
                .map_err(|_| Error::History("the history progress lock is poisoned".into()))?;
        }
    }

    fn failure(&self) -> Option<String> {
        self.0.0.lock().ok().and_then(|s| s.failed.clone())
    }

    fn record(&self, outcome: std::result::Result<u64, String>) {
        let (lock, moved) = &*self.0;
        if let Ok(mut state) = lock.lock() {
            match outcome {
                Ok(done) => state.done = done,
                Err(e) => state.failed = Some(e),
            }
        }
        moved.notify_all();
    }
}

impl Files {
    /// Starts the thread writing under `root`, the tables of each flush in
    /// the order of `tables`.
    pub(super) fn start(root: &HistoryRoot, tables: &'static [&'static str]) -> Result<Self> {
        let (jobs, queue) = sync_channel(QUEUED_FLUSHES);
        let progress = Progress::default();
        let (root, reported) = (root.clone(), progress.clone());
        let thread = std::thread::Builder::new()
            .name("ledger-history".into())
            .spawn(move || write_all(&root, tables, &queue, &reported))
            .map_err(|e| Error::History(format!("cannot start the history thread: {e}")))?;
        Ok(Self {
            jobs: Some(jobs),
            thread: Some(thread),
            progress,
            handed: 0,
        })
    }

    /// Queues one flush; blocks only while [`QUEUED_FLUSHES`] wait already.
    /// An earlier flush that failed is reported here.
    pub(super) fn hand(&mut self, flush: Flush) -> Result<()> {
        if let Some(failed) = self.progress.failure() {
            return Err(Error::History(format!("writing history failed: {failed}")));
        }
        self.handed += 1;
        let sent = self
            .jobs
            .as_ref()
            // Blocks only when the writer is behind: other tasks of the
            // runtime go on meanwhile.
            .is_some_and(|jobs| {
                tokio::task::block_in_place(|| jobs.send((self.handed, flush)).is_ok())
            });
        match sent {
            true => Ok(()),
            false => Err(Error::History("the history thread has stopped".into())),
        }
    }

    /// A ticket for every flush handed over so far.
    pub(super) fn written(&self) -> Written {
        Written {
            progress: self.progress.clone(),
            flush: self.handed,
        }
    }
}

impl Drop for Files {
    /// Lets the thread finish what it was given, and waits for it.
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The thread: writes each flush's files in turn until the queue closes
/// or a write fails (then every later wait reports the failure).
fn write_all(
    root: &HistoryRoot,
    tables: &[&'static str],
    queue: &Receiver<(u64, Flush)>,
    progress: &Progress,
) {
    for (number, mut flush) in queue {
        let written = tables.iter().try_for_each(|table| {
            let Some(rows) = flush.rows.remove(table) else {
                return Ok(());
            };
            let batch = super::ledger::to_batch(super::ledger::schema_of(table)?, &rows)?;
            write_file(root, table, &flush.date, &flush.name, &batch)?;
            metrics::HISTORY_FILES_WRITTEN.inc();
            Ok::<_, Error>(())
        });
        match written {
            Ok(()) => {
                tracing::debug!(file = %flush.name.render(), "ledger history written");
                progress.record(Ok(number));
            }
            Err(e) => {
                tracing::error!(file = %flush.name.render(), error = %e, "ledger history not written");
                progress.record(Err(e.to_string()));
                return;
            }
        }
    }
}
