//! The JSON form of events (DESIGN §3): one flat object with `"type"`, the
//! envelope fields and the payload fields; timestamps as RFC 3339 strings,
//! money and rates as decimal strings. Unknown fields are ignored, so older
//! readers accept newer writers.

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::events::{Envelope, Event, EventBody, EventType};

impl Event {
    /// Parses one JSON event (one NDJSON line).
    pub fn from_json_str(text: &str) -> Result<Event> {
        let value: Value = serde_json::from_str(text).map_err(|e| Error::NotJson {
            message: e.to_string(),
        })?;
        Event::from_json_value(&value)
    }

    /// Reads an event from parsed JSON.
    pub fn from_json_value(value: &Value) -> Result<Event> {
        let object = value.as_object().ok_or(Error::NotAnObject {
            found: json_kind(value),
        })?;
        let type_name = match object.get("type") {
            Some(Value::String(name)) => name,
            Some(_) | None => return Err(Error::MissingType),
        };
        let event_type = EventType::from_name(type_name).ok_or_else(|| Error::UnknownType {
            name: type_name.clone(),
        })?;
        let event_id = object
            .get("event_id")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let to_error = |e: serde_path_to_error::Error<serde_json::Error>| {
            let (field, message) = split_serde_error(&e);
            Error::field(event_type, event_id, field, message)
        };
        let envelope: Envelope = serde_path_to_error::deserialize(value).map_err(to_error)?;
        let body = EventBody::from_json_value(event_type, value).map_err(to_error)?;
        Ok(Event { envelope, body })
    }

    /// The JSON form, `"type"` first.
    pub fn to_json_value(&self) -> Value {
        let mut object = Map::new();
        object.insert(
            "type".to_owned(),
            Value::String(self.event_type().name().to_owned()),
        );
        if let Ok(Value::Object(env)) = serde_json::to_value(&self.envelope) {
            object.extend(env);
        }
        if let Ok(Value::Object(payload)) = self.body.to_json_map() {
            object.extend(payload);
        }
        Value::Object(object)
    }

    /// The JSON form as one line.
    pub fn to_json_string(&self) -> String {
        self.to_json_value().to_string()
    }
}

/// Turns serde's error into (field path, message): serde reports a missing
/// field at its parent's path with the name in the message.
fn split_serde_error(e: &serde_path_to_error::Error<serde_json::Error>) -> (String, String) {
    let path = e.path().to_string();
    let inner = e.inner().to_string();
    // serde_json appends " at line L column C", meaningless for a Value.
    let inner = inner.split(" at line ").next().unwrap_or(&inner).to_owned();
    if let Some(name) = inner
        .strip_prefix("missing field `")
        .and_then(|s| s.strip_suffix('`'))
    {
        let field = if path == "." {
            name.to_owned()
        } else {
            format!("{path}.{name}")
        };
        return (field, "is required".to_owned());
    }
    (path, inner)
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Serde in the JSON form, so state that holds events (snapshots) can be
/// written with serde.
impl serde::Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serde::Serialize::serialize(&self.to_json_value(), s)
    }
}

impl<'de> serde::Deserialize<'de> for Event {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = <Value as serde::Deserialize>::deserialize(d)?;
        Event::from_json_value(&value).map_err(serde::de::Error::custom)
    }
}
