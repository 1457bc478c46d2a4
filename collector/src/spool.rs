//! The on-disk spool: every event the collector makes is written here
//! before it is handed to Kafka, and stays until the broker acknowledged
//! it. A broker outage, a failed send or a restart (kill -9 included) loses
//! nothing that reached the spool, and what waits is sent again in order.
//!
//! Layout, in the spool folder:
//! - `events.ndjson`: one event per line in its JSON form, in the order
//!   made. A line without its newline (a write cut short) is ignored.
//! - `acked`: how many lines from the top were acknowledged, replaced
//!   atomically (temporary file + rename).
//!
//! Durability: the appended lines are fsynced once per round before any of
//! them is sent. Every file replaced (`acked`, and the file itself when its
//! acknowledged top is cut off) is written under a temporary name,
//! fsynced, renamed, and the folder fsynced, so a power loss leaves the
//! old or the new file, never a rename that did not reach the disk. The
//! order of the two replacements (below) means a crash between them sends
//! some events again — Kafka may then hold them twice — and never skips
//! one.
//!
//! The spool is bounded: past `max_bytes` the oldest unacknowledged lines
//! are dropped, counted and logged at error. The acknowledged top is cut
//! off the file when it is more than half of it.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use gpuledger_schemas::Event;

/// Why the spool failed.
#[derive(Debug, thiserror::Error)]
#[error("spool {path}: {source}")]
pub struct SpoolError {
    path: String,
    #[source]
    source: std::io::Error,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> SpoolError + '_ {
    move |source| SpoolError {
        path: path.display().to_string(),
        source,
    }
}

/// One spooled event waiting for its acknowledgement.
#[derive(Debug)]
struct Waiting {
    line: String,
    /// Bytes in the file, newline included.
    size: u64,
    /// The event itself while this run has it (appended here, not yet
    /// sent), so that sending does not parse the line back.
    event: Option<Event>,
}

/// The spool of one collector.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    /// Every line not yet acknowledged, oldest first.
    pending: std::collections::VecDeque<Waiting>,
    /// How many of `pending` (from the front) were handed to the producer
    /// in this run: in flight, so never dropped.
    sent: usize,
    /// Lines acknowledged from the top of the file.
    acked: u64,
    /// Lines in the file.
    lines: u64,
    /// Bytes in the file.
    bytes: u64,
    max_bytes: u64,
    /// Lines dropped because the spool was full.
    pub dropped: u64,
}

impl Spool {
    /// Opens (or creates) the spool in `dir` and reads back what waits.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<Self, SpoolError> {
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let log = dir.join("events.ndjson");
        let acked: u64 = std::fs::read_to_string(dir.join("acked"))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0);
        let mut pending = std::collections::VecDeque::new();
        let (mut lines, mut bytes) = (0u64, 0u64);
        if let Ok(file) = File::open(&log) {
            let mut reader = BufReader::new(file);
            let mut line = String::new();
            loop {
                line.clear();
                let n = reader.read_line(&mut line).map_err(io(&log))?;
                if n == 0 || !line.ends_with('\n') {
                    // The end, or a line whose write was cut short.
                    break;
                }
                lines += 1;
                bytes += n as u64;
                if lines > acked {
                    pending.push_back(Waiting {
                        line: line.trim_end().to_owned(),
                        size: n as u64,
                        event: None,
                    });
                }
            }
        }
        let mut spool = Self {
            dir: dir.to_owned(),
            pending,
            sent: 0,
            acked: acked.min(lines),
            lines,
            bytes,
            max_bytes,
            dropped: 0,
        };
        // Rewrite without a torn tail, so appends start on a fresh line.
        spool.rewrite()?;
        Ok(spool)
    }

    /// Events waiting for an acknowledgement, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = &str> {
        self.pending.iter().map(|w| w.line.as_str())
    }

    /// How many wait.
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Bytes in the spool file.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Appends `events` durably (one fsync).
    pub fn append(&mut self, events: &[Event]) -> Result<(), SpoolError> {
        if events.is_empty() {
            return Ok(());
        }
        let log = self.dir.join("events.ndjson");
        let mut text = String::new();
        for event in events {
            let line = event.to_json_string();
            text.push_str(&line);
            text.push('\n');
            self.pending.push_back(Waiting {
                size: line.len() as u64 + 1,
                line,
                event: Some(event.clone()),
            });
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(io(&log))?;
        file.write_all(text.as_bytes()).map_err(io(&log))?;
        file.sync_data().map_err(io(&log))?;
        self.lines += events.len() as u64;
        self.bytes += text.len() as u64;
        self.enforce_bound()?;
        Ok(())
    }

    /// The oldest event not yet handed to the producer, now handed: kept
    /// from its append, or read back from its line.
    pub fn next_to_send(&mut self) -> Option<gpuledger_schemas::Result<Event>> {
        let waiting = self.pending.get_mut(self.sent)?;
        self.sent += 1;
        Some(match waiting.event.take() {
            Some(event) => Ok(event),
            None => Event::from_json_str(&waiting.line),
        })
    }

    /// Lines handed to the producer and not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.sent
    }

    /// Drops the oldest waiting lines not in flight while the file is past
    /// its bound.
    fn enforce_bound(&mut self) -> Result<(), SpoolError> {
        let mut dropped = 0u64;
        while self.bytes > self.max_bytes {
            let Some(Waiting { size, .. }) = self.pending.remove(self.sent) else {
                break;
            };
            self.bytes -= size.min(self.bytes);
            dropped += 1;
        }
        if dropped > 0 {
            self.dropped += dropped;
            crate::metrics::SPOOL_DROPPED.add(dropped);
            tracing::error!(
                dropped,
                total_dropped = self.dropped,
                max_bytes = self.max_bytes,
                "spool full: the oldest undelivered events were dropped"
            );
            self.rewrite()?;
        }
        Ok(())
    }

    /// Marks the oldest `n` lines in flight acknowledged.
    pub fn ack(&mut self, n: usize) -> Result<(), SpoolError> {
        let n = n.min(self.sent);
        if n == 0 {
            return Ok(());
        }
        self.pending.drain(..n);
        self.sent -= n;
        self.acked += n as u64;
        if self.acked * 2 > self.lines {
            self.rewrite()
        } else {
            self.write_acked()
        }
    }

    fn write_acked(&self) -> Result<(), SpoolError> {
        let path = self.dir.join("acked");
        let tmp = self.dir.join(".acked.tmp");
        let mut file = File::create(&tmp).map_err(io(&tmp))?;
        file.write_all(self.acked.to_string().as_bytes())
            .map_err(io(&tmp))?;
        file.sync_data().map_err(io(&tmp))?;
        self.replace(&tmp, &path)
    }

    /// Renames `tmp` (written and fsynced) over `path`, then fsyncs the
    /// folder so that the rename itself survives a power loss.
    fn replace(&self, tmp: &Path, path: &Path) -> Result<(), SpoolError> {
        std::fs::rename(tmp, path).map_err(io(path))?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .map_err(io(&self.dir))
    }

    /// Rewrites the file with only the waiting lines, and `acked` as 0.
    fn rewrite(&mut self) -> Result<(), SpoolError> {
        let log = self.dir.join("events.ndjson");
        let tmp = self.dir.join(".events.ndjson.tmp");
        let mut file = File::create(&tmp).map_err(io(&tmp))?;
        let mut bytes = 0u64;
        for Waiting { line, .. } in &self.pending {
            file.write_all(line.as_bytes()).map_err(io(&tmp))?;
            file.write_all(b"\n").map_err(io(&tmp))?;
            bytes += line.len() as u64 + 1;
        }
        file.sync_data().map_err(io(&tmp))?;
        // Order matters across a crash: the new file (only waiting lines)
        // first, then `acked` = 0. A crash between them leaves the new file
        // with the old count, which would skip waiting lines — so the
        // count is written as 0 before the file is swapped in, and a crash
        // between those leaves the old file read from its top again: sent
        // twice at worst, never lost.
        self.acked = 0;
        self.write_acked()?;
        self.replace(&tmp, &log)?;
        self.lines = self.pending.len() as u64;
        self.bytes = bytes;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use gpuledger_schemas::samples::one_of_each;

    use super::*;

    fn events(n: usize) -> Vec<Event> {
        one_of_each().into_iter().cycle().take(n).collect()
    }

    #[test]
    fn what_is_not_acknowledged_survives_a_reopen_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open(dir.path(), 1 << 30).unwrap();
        let sent = events(10);
        spool.append(&sent[..6]).unwrap();
        spool.next_to_send();
        spool.next_to_send();
        spool.ack(2).unwrap();
        spool.append(&sent[6..]).unwrap();
        drop(spool);
        let spool = Spool::open(dir.path(), 1 << 30).unwrap();
        let waiting: Vec<String> = spool.pending().map(str::to_owned).collect();
        let expected: Vec<String> = sent[2..].iter().map(Event::to_json_string).collect();
        assert_eq!(waiting, expected);
    }

    #[test]
    fn a_torn_last_line_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open(dir.path(), 1 << 30).unwrap();
        spool.append(&events(3)).unwrap();
        drop(spool);
        let log = dir.path().join("events.ndjson");
        let mut file = OpenOptions::new().append(true).open(&log).unwrap();
        file.write_all(b"{\"type\":\"GpuSam").unwrap();
        drop(file);
        let mut spool = Spool::open(dir.path(), 1 << 30).unwrap();
        assert_eq!(spool.len(), 3);
        spool.append(&events(1)).unwrap();
        drop(spool);
        assert_eq!(Spool::open(dir.path(), 1 << 30).unwrap().len(), 4);
    }

    #[test]
    fn past_its_bound_the_oldest_are_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let all = events(20);
        let one = all[0].to_json_string().len() as u64 + 1;
        let mut spool = Spool::open(dir.path(), one * 5).unwrap();
        spool.append(&all[..2]).unwrap();
        // The first is in flight: never dropped; the second is the oldest
        // waiting, dropped first.
        let in_flight = spool.next_to_send().unwrap().unwrap().to_json_string();
        let second = spool.pending().nth(1).unwrap().to_owned();
        spool.append(&all[2..20]).unwrap();
        assert!(spool.dropped > 0);
        assert_eq!(spool.pending().next().unwrap(), in_flight);
        assert!(spool.pending().all(|l| l != second));
        assert!(spool.bytes() <= one * 8, "{}", spool.bytes());
        let kept = spool.len();
        drop(spool);
        assert_eq!(Spool::open(dir.path(), one * 5).unwrap().len(), kept);
    }

    #[test]
    fn acknowledged_lines_are_cut_from_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open(dir.path(), 1 << 30).unwrap();
        spool.append(&events(10)).unwrap();
        for _ in 0..8 {
            spool.next_to_send();
        }
        spool.ack(8).unwrap();
        let text = std::fs::read_to_string(dir.path().join("events.ndjson")).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert_eq!(spool.len(), 2);
    }
}
