//! Ids of the events the control API creates.

use gpuledger_schemas::{EventBody, Timestamp};

/// Ids for the events the API creates: unique per call, also for calls in
/// the same microsecond (the ledger ignores a repeated id as a duplicate)
/// and across instances and restarts.
#[derive(Debug)]
pub(super) struct EventIds {
    /// Tells this process's ids from any other's.
    instance: String,
    next: std::sync::atomic::AtomicU64,
}

impl EventIds {
    pub(super) fn new() -> Self {
        use std::hash::{BuildHasher, Hasher};
        // The standard library seeds each `RandomState` from the system's
        // randomness; mixed with the start time.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_i64(Timestamp::now().as_micros());
        hasher.write_u32(std::process::id());
        Self {
            instance: format!("{:08x}", hasher.finish() as u32),
            next: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `api-<micros>-<instance>-<sequence>`: for an event a caller sent
    /// without an idempotency key.
    pub(super) fn fresh(&self, now: Timestamp) -> String {
        let sequence = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!("api-{}-{}-{sequence}", now.as_micros(), self.instance)
    }

    /// `api-<type>-<key>-<micros>-<instance>-<sequence>`.
    pub(super) fn make(&self, body: &EventBody, now: Timestamp) -> String {
        let sequence = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        format!(
            "api-{}-{}-{}-{}-{sequence}",
            body.event_type().name(),
            body.key(),
            now.as_micros(),
            self.instance,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuledger_schemas::events::Clock;
    use gpuledger_schemas::{EventBody, Timestamp};

    /// Calls in the same microsecond, of one instance or of two, get ids
    /// of their own: a repeated id would be dropped by the ledger as a
    /// duplicate and its caller handed another call's answer.
    #[test]
    fn event_ids_differ_within_a_microsecond_and_between_instances() {
        let now = Timestamp::now();
        let body = EventBody::from(Clock {
            pool: "h200".into(),
            now: None,
        });
        let (a, b) = (EventIds::new(), EventIds::new());
        let ids: std::collections::HashSet<String> = (0..1_000)
            .flat_map(|_| [a.make(&body, now), b.make(&body, now)])
            .collect();
        assert_eq!(ids.len(), 2_000);
        assert!(ids.iter().all(|id| id.starts_with("api-Clock-h200-")));
    }
}
