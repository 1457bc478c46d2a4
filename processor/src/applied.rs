//! How far this process's ledger worker has applied each ledger partition.
//!
//! The control API paces a large `POST /v1/events` body by it: the body is
//! appended a slice at a time, and the next slice waits until the worker
//! has applied the previous one, so an admission appended meanwhile waits
//! behind at most one slice rather than the whole body.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The last offset applied in each partition this process's worker owns.
#[derive(Debug, Clone, Default)]
pub struct AppliedOffsets(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    offsets: Mutex<HashMap<i32, i64>>,
    moved: Notify,
}

/// Whether `partition` has reached `offset`, as far as this process knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// The worker applied the offset.
    Yes,
    /// The partition is not this process's: nothing here can tell.
    NotOwned,
    /// Not within the time given.
    TimedOut,
}

impl AppliedOffsets {
    /// The worker applied the record at `offset` of `partition`.
    pub fn applied(&self, partition: i32, offset: i64) {
        if let Ok(mut map) = self.0.offsets.lock() {
            map.insert(partition, offset);
        }
        self.0.moved.notify_waiters();
    }

    /// The worker gave `partition` up.
    pub fn released(&self, partition: i32) {
        if let Ok(mut map) = self.0.offsets.lock() {
            map.remove(&partition);
        }
        self.0.moved.notify_waiters();
    }

    fn state(&self, partition: i32, offset: i64) -> Option<Reached> {
        let map = self.0.offsets.lock().ok()?;
        match map.get(&partition) {
            None => Some(Reached::NotOwned),
            Some(&applied) if applied >= offset => Some(Reached::Yes),
            Some(_) => None,
        }
    }

    /// Waits until `partition` has applied `offset`, at most `within`.
    pub async fn reached(&self, partition: i32, offset: i64, within: Duration) -> Reached {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            // Registered before the check, so a move in between wakes it.
            let moved = self.0.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if let Some(state) = self.state(partition, offset) {
                return state;
            }
            if tokio::time::timeout_at(deadline, moved).await.is_err() {
                return Reached::TimedOut;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waits_for_the_offset_and_not_for_partitions_of_others() {
        let applied = AppliedOffsets::default();
        let short = Duration::from_millis(20);
        assert_eq!(applied.reached(0, 5, short).await, Reached::NotOwned);
        applied.applied(0, 3);
        assert_eq!(applied.reached(0, 5, short).await, Reached::TimedOut);
        let later = applied.clone();
        let mover = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            later.applied(0, 5);
        });
        assert_eq!(
            applied.reached(0, 5, Duration::from_secs(10)).await,
            Reached::Yes
        );
        mover.await.unwrap();
        applied.released(0);
        assert_eq!(applied.reached(0, 9, short).await, Reached::NotOwned);
    }
}
