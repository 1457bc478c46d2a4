//! Answers for callers waiting on the ledger.
//!
//! A caller (the control API) registers what it waits for before it appends
//! an event: the decisions the event causes or its rejection, or for an
//! admission the decision of its `request_id` (a repeated request is
//! answered with the original decision, whose cause is the first request).
//! Answers come from two places: the ledger worker of this process, as
//! soon as it decides (or, with `--answer-at committed`, once the decision's
//! transaction commits; see [`crate::ledger_worker::AnswerAt`]), and a
//! reader of the committed decisions and DLQ topics for partitions another
//! instance owns. The first one wins.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use gpuledger_schemas::{Event, EventBody};
use tokio::sync::mpsc;

/// What the ledger made of an event.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A decision it caused.
    Decision(Box<Event>),
    /// It was rejected, with the reason.
    Rejected(String),
}

/// What a caller waits for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Key {
    /// Decisions caused by, or the rejection of, the event with this id.
    Cause(String),
    /// The decision of this admission request id.
    Request(String),
}

type Senders = HashMap<Key, Vec<mpsc::UnboundedSender<Answer>>>;

/// Callers waiting for answers.
#[derive(Debug, Clone, Default)]
pub struct Waiters(Arc<Mutex<Senders>>);

impl Waiters {
    /// Registers interest in any of `keys`; call before the event is
    /// appended so the answer cannot slip past. The first answer wins.
    pub fn wait_for(&self, keys: &[Key]) -> mpsc::UnboundedReceiver<Answer> {
        let (tx, rx) = mpsc::unbounded_channel();
        if let Ok(mut map) = self.0.lock() {
            for key in keys {
                map.entry(key.clone()).or_default().push(tx.clone());
            }
        }
        rx
    }

    /// Forgets the waiters of `keys` (answered, or gave up).
    pub fn forget(&self, keys: &[Key]) {
        if let Ok(mut map) = self.0.lock() {
            for key in keys {
                map.remove(key);
            }
        }
    }

    /// Hands a decision to whoever waits for its request or its cause.
    pub fn decided(&self, event: &Event) {
        let mut keys = Vec::with_capacity(2);
        if let EventBody::AdmissionDecision(d) = &event.body {
            keys.push(Key::Request(d.request_id.to_string()));
        }
        if let Some(cause) = cause_of(event) {
            keys.push(Key::Cause(cause.to_owned()));
        }
        let senders = self.senders(&keys);
        if senders.is_empty() {
            return;
        }
        let answer = Answer::Decision(Box::new(event.clone()));
        for tx in senders {
            let _ = tx.send(answer.clone());
        }
    }

    /// Hands a rejection to whoever waits for the event `event_id`.
    pub fn rejected(&self, event_id: &str, reason: &str) {
        for tx in self.senders(&[Key::Cause(event_id.to_owned())]) {
            let _ = tx.send(Answer::Rejected(reason.to_owned()));
        }
    }

    fn senders(&self, keys: &[Key]) -> Vec<mpsc::UnboundedSender<Answer>> {
        let Ok(map) = self.0.lock() else {
            return Vec::new();
        };
        keys.iter()
            .filter_map(|key| map.get(key))
            .flatten()
            .cloned()
            .collect()
    }
}

/// The id of the event that caused a decision; `None` for other events.
fn cause_of(event: &Event) -> Option<&str> {
    Some(match &event.body {
        EventBody::AdmissionDecision(d) => &d.cause_event_id,
        EventBody::ReservationDecision(d) => &d.cause_event_id,
        EventBody::BurstTriggered(d) => &d.cause_event_id,
        EventBody::Reclassified(d) => &d.cause_event_id,
        EventBody::QuotaViolation(d) => &d.cause_event_id,
        EventBody::BudgetAlert(d) => &d.cause_event_id,
        EventBody::UnmeteredUsage(d) => &d.cause_event_id,
        _ => return None,
    })
}
