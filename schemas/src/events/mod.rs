//! The events of the contract (DESIGN §3): an [`Envelope`] common to all,
//! and one payload struct per event type, gathered in [`EventBody`].

pub mod decisions;
pub mod ledger;
pub mod telemetry;

use serde::{Deserialize, Serialize};

use crate::time::Timestamp;
use gpuledger_collections::Text;

pub use decisions::*;
pub use ledger::*;
pub use telemetry::*;

/// The Kafka topics, before the configurable prefix is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Topic {
    /// `GpuSample`, keyed by node.
    Telemetry,
    /// The state machine's input, keyed by pool.
    Ledger,
    /// Decisions and alerts, keyed by tenant.
    Decisions,
    /// What could not be decoded or validated, under its original key.
    Dlq,
}

impl Topic {
    /// Every topic.
    pub const ALL: [Topic; 4] = [
        Topic::Telemetry,
        Topic::Ledger,
        Topic::Decisions,
        Topic::Dlq,
    ];

    /// The topic's name without prefix, e.g. `gpuledger.ledger`.
    pub const fn base_name(self) -> &'static str {
        match self {
            Topic::Telemetry => "gpuledger.telemetry",
            Topic::Ledger => "gpuledger.ledger",
            Topic::Decisions => "gpuledger.decisions",
            Topic::Dlq => "gpuledger.dlq",
        }
    }

    /// The topic's name with a prefix (`""` for none), e.g. `test1.gpuledger.ledger`.
    pub fn name(self, prefix: &str) -> String {
        format!("{prefix}{}", self.base_name())
    }
}

/// Fields every event carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Unique; retries reuse it, so it is the dedupe key.
    pub event_id: Text,
    /// When it happened, UTC. Nothing in the ledger uses wall-clock time.
    pub event_time: Timestamp,
    /// Who emitted it.
    pub source: Text,
    /// Which cluster.
    pub cluster: Text,
}

/// One event: envelope plus payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub envelope: Envelope,
    pub body: EventBody,
}

impl Event {
    /// Wraps a payload.
    pub fn new(envelope: Envelope, body: impl Into<EventBody>) -> Self {
        Self {
            envelope,
            body: body.into(),
        }
    }

    /// The event's type.
    pub fn event_type(&self) -> EventType {
        self.body.event_type()
    }

    /// The Kafka key: node for telemetry, pool for the ledger, tenant for decisions.
    pub fn key(&self) -> &str {
        self.body.key()
    }
}

/// Declares the event registry once: the payload enum, the type enum, each
/// type's topic and Kafka key, and the Avro and JSON dispatch.
macro_rules! events {
    ($( $name:ident => $topic:ident, key |$p:ident| $key:expr; )+) => {
        /// The payload of an event, by type.
        #[derive(Debug, Clone, PartialEq)]
        pub enum EventBody { $( $name($name), )+ }

        /// The type of an event; its name is the JSON `"type"`, the Avro
        /// record name and the CloudEvents type after `gpuledger.`.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum EventType { $( $name, )+ }

        impl EventType {
            /// Every event type.
            pub const ALL: &'static [EventType] = &[$(EventType::$name),+];

            /// The contract's name, e.g. `JobEvent`.
            pub const fn name(self) -> &'static str {
                match self { $( EventType::$name => stringify!($name), )+ }
            }

            /// The topic it travels on.
            pub const fn topic(self) -> Topic {
                match self { $( EventType::$name => Topic::$topic, )+ }
            }

            /// Looks a type up by its name.
            pub fn from_name(name: &str) -> Option<EventType> {
                match name { $( stringify!($name) => Some(EventType::$name), )+ _ => None }
            }
        }

        impl EventBody {
            /// This payload's type.
            pub fn event_type(&self) -> EventType {
                match self { $( EventBody::$name(_) => EventType::$name, )+ }
            }

            /// The Kafka key.
            pub fn key(&self) -> &str {
                match self { $( EventBody::$name($p) => $key, )+ }
            }

            pub(crate) fn write_avro_fields(&self, out: &mut Vec<(String, apache_avro::types::Value)>) {
                match self { $( EventBody::$name(p) => $crate::avro::AvroRecord::write_fields(p, out), )+ }
            }

            pub(crate) fn read_avro_fields(
                event_type: EventType,
                fields: &mut $crate::avro::Fields,
            ) -> Result<EventBody, $crate::avro::FieldError> {
                Ok(match event_type {
                    $( EventType::$name => EventBody::$name($crate::avro::AvroRecord::read_fields(fields)?), )+
                })
            }

            pub(crate) fn to_json_map(&self) -> serde_json::Result<serde_json::Value> {
                match self { $( EventBody::$name(p) => serde_json::to_value(p), )+ }
            }

            pub(crate) fn from_json_value(
                event_type: EventType,
                value: &serde_json::Value,
            ) -> Result<EventBody, serde_path_to_error::Error<serde_json::Error>> {
                Ok(match event_type {
                    $( EventType::$name => EventBody::$name(serde_path_to_error::deserialize(value)?), )+
                })
            }
        }

        $(
            impl From<$name> for EventBody {
                fn from(p: $name) -> Self { EventBody::$name(p) }
            }
        )+
    };
}

events! {
    NodeInventory => Ledger, key |p| &p.pool;
    DeviceHealth => Ledger, key |p| &p.pool;
    MigAssignment => Ledger, key |p| &p.pool;
    JobEvent => Ledger, key |p| &p.pool;
    AdmissionRequest => Ledger, key |p| &p.pool;
    ReservationRequest => Ledger, key |p| &p.pool;
    ReservationCancel => Ledger, key |p| &p.pool;
    TenantPolicy => Ledger, key |p| &p.pool;
    PriceBook => Ledger, key |p| p.pool.as_deref().unwrap_or("");
    UsageRecord => Ledger, key |p| &p.pool;
    UnattributedProcess => Ledger, key |p| &p.pool;
    Clock => Ledger, key |p| &p.pool;
    GpuSample => Telemetry, key |p| &p.node;
    AdmissionDecision => Decisions, key |p| &p.tenant;
    ReservationDecision => Decisions, key |p| &p.tenant;
    BurstTriggered => Decisions, key |p| &p.tenant;
    Reclassified => Decisions, key |p| &p.tenant;
    QuotaViolation => Decisions, key |p| &p.tenant;
    BudgetAlert => Decisions, key |p| &p.tenant;
    UnmeteredUsage => Decisions, key |p| p.tenant.as_deref().unwrap_or(&p.node);
}
