//! The one error type of the contract crate. Every message names what was
//! wrong: the event type, its `event_id` and the field where known.

use crate::events::EventType;

/// Result with the contract's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong decoding, encoding, parsing or validating an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Fewer bytes than the 10-byte single-object header.
    #[error(
        "message of {len} bytes is too short for Avro single-object encoding (it needs a 10-byte header)"
    )]
    TooShort { len: usize },

    /// The first two bytes are not `C3 01`.
    #[error("message does not start with the Avro single-object marker C3 01 (found {found:02X?})")]
    BadMarker { found: [u8; 2] },

    /// The writer's schema is not one this reader knows.
    #[error(
        "no known gpuledger schema has fingerprint {fingerprint} (a newer writer, or not a gpuledger event)"
    )]
    UnknownSchema { fingerprint: String },

    /// The Avro datum does not decode with the writer's schema.
    #[error("{event_type} could not be decoded: {message}")]
    Datum {
        event_type: &'static str,
        message: String,
    },

    /// The Avro datum could not be encoded.
    #[error("{event_type} {event_id} could not be encoded: {message}")]
    Encode {
        event_type: &'static str,
        event_id: String,
        message: String,
    },

    /// One field of an event is missing, malformed or invalid.
    #[error("{event_type} {event_id}: field `{field}` {message}")]
    Field {
        event_type: String,
        event_id: String,
        field: String,
        message: String,
    },

    /// A JSON line that is not JSON.
    #[error("not valid JSON: {message}")]
    NotJson { message: String },

    /// JSON that is not an object.
    #[error("an event must be a JSON object, found {found}")]
    NotAnObject { found: &'static str },

    /// A JSON event without `"type"`.
    #[error("event has no \"type\" field (expected one of: {})", known_types())]
    MissingType,

    /// A `"type"` that is not an event of the contract.
    #[error("unknown event type {name:?} (expected one of: {})", known_types())]
    UnknownType { name: String },

    /// An event sent to a topic that does not carry it.
    #[error("{event_type} {event_id} does not belong on {topic} (it travels on {expected})")]
    WrongTopic {
        event_type: &'static str,
        event_id: String,
        topic: String,
        expected: String,
    },
}

impl Error {
    /// A field error for an event.
    pub fn field(
        event_type: EventType,
        event_id: &str,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error::Field {
            event_type: event_type.name().to_owned(),
            event_id: display_id(event_id),
            field: field.into(),
            message: message.into(),
        }
    }

    /// The field an error is about, if it is about one.
    pub fn field_name(&self) -> Option<&str> {
        match self {
            Error::Field { field, .. } => Some(field),
            _ => None,
        }
    }
}

pub(crate) fn display_id(event_id: &str) -> String {
    if event_id.is_empty() {
        "(no event_id)".to_owned()
    } else {
        format!("{event_id:?}")
    }
}

fn known_types() -> String {
    EventType::ALL
        .iter()
        .map(|t| t.name())
        .collect::<Vec<_>>()
        .join(", ")
}
