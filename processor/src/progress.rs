//! One line of progress on stderr, rewritten in place: a bar, the count
//! and the rate. Used by the long offline commands (`replay`, `generate`).

use std::io::Write;
use std::time::Instant;

/// Progress of `what` towards `total` units, started at `started`.
#[derive(Debug, Clone)]
pub struct Progress {
    what: &'static str,
    unit: &'static str,
    total: u64,
    started: Instant,
}

impl Progress {
    /// A bar for `total` `unit`s of `what`, starting now.
    pub fn new(what: &'static str, unit: &'static str, total: u64) -> Self {
        Self {
            what,
            unit,
            total: total.max(1),
            started: Instant::now(),
        }
    }

    /// Rewrites the line with `done` units done.
    pub fn show(&self, done: u64) {
        let width = 30;
        let filled = (done.min(self.total) * width / self.total) as usize;
        let rate = done as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        let mut err = std::io::stderr().lock();
        // Progress is best effort: a closed stderr is no reason to stop.
        let _ = write!(
            err,
            "\r{} [{}{}] {done}/{} ({rate:.0} {}/s)",
            self.what,
            "#".repeat(filled),
            " ".repeat(width as usize - filled),
            self.total,
            self.unit,
        );
        let _ = err.flush();
    }

    /// Ends the line.
    pub fn finish(&self, done: u64) {
        self.show(done);
        let _ = writeln!(std::io::stderr().lock());
    }
}
