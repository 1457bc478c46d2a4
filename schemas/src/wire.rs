//! The Kafka wire format (DESIGN §2): the value is Avro single-object
//! encoding — marker `C3 01`, the 8-byte little-endian CRC-64-AVRO
//! fingerprint of the writer's schema, then the binary datum — and each
//! record carries CloudEvents binary-mode headers.
//!
//! A reader finds the writer's schema by fingerprint among every released
//! schema version, then resolves the datum to the current schema of that
//! event type, so writers may add optional fields before readers know them.

use std::collections::HashMap;
use std::sync::LazyLock;

use apache_avro::Schema;
use apache_avro::reader::datum::GenericDatumReader;
use apache_avro::types::Value;
use apache_avro::writer::datum::GenericDatumWriter;

use crate::avro::Fields;
use crate::error::{Error, Result, display_id};
use crate::events::{Envelope, Event, EventBody, EventType};
use crate::sample_datum::{self, SampleRecord};

/// The two bytes that open every single-object encoded message.
pub const SINGLE_OBJECT_MARKER: [u8; 2] = [0xC3, 0x01];

/// Header bytes before the datum: marker plus fingerprint.
pub const HEADER_LEN: usize = 10;

/// A CRC-64-AVRO schema fingerprint, in wire (little-endian) byte order.
pub type Fingerprint = [u8; 8];

/// Every released schema, by event type and version (`schemas/avro/vN/`).
/// Appending a version here is how a schema evolves; nothing is ever removed.
const RELEASED: &[(EventType, u32, &str)] = &[
    (
        EventType::NodeInventory,
        1,
        include_str!("../avro/v1/NodeInventory.avsc"),
    ),
    (
        EventType::DeviceHealth,
        1,
        include_str!("../avro/v1/DeviceHealth.avsc"),
    ),
    (
        EventType::MigAssignment,
        1,
        include_str!("../avro/v1/MigAssignment.avsc"),
    ),
    (
        EventType::JobEvent,
        1,
        include_str!("../avro/v1/JobEvent.avsc"),
    ),
    (
        EventType::AdmissionRequest,
        1,
        include_str!("../avro/v1/AdmissionRequest.avsc"),
    ),
    (
        EventType::ReservationRequest,
        1,
        include_str!("../avro/v1/ReservationRequest.avsc"),
    ),
    (
        EventType::ReservationCancel,
        1,
        include_str!("../avro/v1/ReservationCancel.avsc"),
    ),
    (
        EventType::TenantPolicy,
        1,
        include_str!("../avro/v1/TenantPolicy.avsc"),
    ),
    (
        EventType::PriceBook,
        1,
        include_str!("../avro/v1/PriceBook.avsc"),
    ),
    (
        EventType::UsageRecord,
        1,
        include_str!("../avro/v1/UsageRecord.avsc"),
    ),
    (
        EventType::UnattributedProcess,
        1,
        include_str!("../avro/v1/UnattributedProcess.avsc"),
    ),
    (EventType::Clock, 1, include_str!("../avro/v1/Clock.avsc")),
    (
        EventType::GpuSample,
        1,
        include_str!("../avro/v1/GpuSample.avsc"),
    ),
    (
        EventType::AdmissionDecision,
        1,
        include_str!("../avro/v1/AdmissionDecision.avsc"),
    ),
    (
        EventType::ReservationDecision,
        1,
        include_str!("../avro/v1/ReservationDecision.avsc"),
    ),
    (
        EventType::BurstTriggered,
        1,
        include_str!("../avro/v1/BurstTriggered.avsc"),
    ),
    (
        EventType::Reclassified,
        1,
        include_str!("../avro/v1/Reclassified.avsc"),
    ),
    (
        EventType::QuotaViolation,
        1,
        include_str!("../avro/v1/QuotaViolation.avsc"),
    ),
    (
        EventType::BudgetAlert,
        1,
        include_str!("../avro/v1/BudgetAlert.avsc"),
    ),
    (
        EventType::UnmeteredUsage,
        1,
        include_str!("../avro/v1/UnmeteredUsage.avsc"),
    ),
];

/// One schema version of one event type.
#[derive(Debug)]
struct SchemaVersion {
    event_type: EventType,
    version: u32,
    /// Leaked on purpose: schemas live as long as the program, and the
    /// cached readers and writers below borrow them.
    schema: &'static Schema,
    fingerprint: Fingerprint,
}

/// The schemas a codec reads and writes.
pub struct Codec {
    versions: Vec<SchemaVersion>,
    by_fingerprint: HashMap<Fingerprint, usize>,
    /// The version each event type is written with (the newest).
    current: HashMap<EventType, usize>,
    /// One reader per writer fingerprint, resolving to the current version;
    /// building one resolves schemas, so it is done once, not per message.
    readers: HashMap<Fingerprint, GenericDatumReader<'static>>,
    /// One writer per event type, for its current version.
    writers: HashMap<EventType, GenericDatumWriter<'static>>,
    /// The fingerprint of the released `GpuSample` v1 schema while it is
    /// the one samples resolve to: its datums are read directly.
    direct_sample: Option<Fingerprint>,
}

impl std::fmt::Debug for Codec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Codec")
            .field("versions", &self.versions)
            .finish()
    }
}

static BUILTIN: LazyLock<Codec> = LazyLock::new(|| {
    let mut codec = Codec::empty();
    for (event_type, version, text) in RELEASED {
        // The schemas are part of the build; a broken one is caught by the
        // unit tests, so failing loudly here is a programming error only.
        codec
            .add_schema(*event_type, *version, text)
            .unwrap_or_else(|e| {
                panic!(
                    "built-in schema {} v{version} is invalid: {e}",
                    event_type.name()
                )
            });
    }
    codec
        .finish()
        .unwrap_or_else(|e| panic!("built-in schemas do not resolve: {e}"));
    codec
});

impl Codec {
    /// The codec for every released schema.
    pub fn builtin() -> &'static Codec {
        &BUILTIN
    }

    fn empty() -> Self {
        Self {
            versions: Vec::new(),
            by_fingerprint: HashMap::new(),
            current: HashMap::new(),
            readers: HashMap::new(),
            writers: HashMap::new(),
            direct_sample: None,
        }
    }

    /// Builds the cached readers and writers once every version is known.
    fn finish(&mut self) -> Result<(), String> {
        self.readers.clear();
        self.writers.clear();
        for version in &self.versions {
            let current = &self.versions[self.current[&version.event_type]];
            let reader_schema =
                (current.fingerprint != version.fingerprint).then_some(current.schema);
            let reader = GenericDatumReader::builder(version.schema)
                .maybe_reader_schema(reader_schema)
                .build()
                .map_err(|e| e.to_string())?;
            self.readers.insert(version.fingerprint, reader);
        }
        for (&event_type, &index) in &self.current {
            let writer = GenericDatumWriter::builder(self.versions[index].schema)
                .build()
                .map_err(|e| e.to_string())?;
            self.writers.insert(event_type, writer);
        }
        let released = RELEASED
            .iter()
            .find(|(t, v, _)| *t == EventType::GpuSample && *v == 1)
            .map(|(_, _, text)| Schema::parse_str(text).map(|s| fingerprint(&s)))
            .transpose()
            .map_err(|e| e.to_string())?;
        self.direct_sample = released.filter(|fp| {
            self.current
                .get(&EventType::GpuSample)
                .is_some_and(|&i| self.versions[i].fingerprint == *fp)
        });
        Ok(())
    }

    /// A codec with the released schemas plus `extra` versions (a schema a
    /// newer writer uses, or one under test). The highest version of each
    /// type becomes the one this codec writes and resolves to.
    pub fn with_versions(extra: &[(EventType, u32, &str)]) -> Result<Self, String> {
        let mut codec = Self::empty();
        for (event_type, version, text) in RELEASED.iter().chain(extra) {
            codec.add_schema(*event_type, *version, text)?;
        }
        codec.finish()?;
        Ok(codec)
    }

    fn add_schema(
        &mut self,
        event_type: EventType,
        version: u32,
        text: &str,
    ) -> Result<(), String> {
        let schema: &'static Schema = Box::leak(Box::new(
            Schema::parse_str(text).map_err(|e| e.to_string())?,
        ));
        let fingerprint = fingerprint(schema);
        let index = self.versions.len();
        self.versions.push(SchemaVersion {
            event_type,
            version,
            schema,
            fingerprint,
        });
        self.by_fingerprint.insert(fingerprint, index);
        let newer = self
            .current
            .get(&event_type)
            .is_none_or(|&i| self.versions[i].version < version);
        if newer {
            self.current.insert(event_type, index);
        }
        Ok(())
    }

    /// The schema this codec writes `event_type` with.
    pub fn schema(&self, event_type: EventType) -> &Schema {
        self.versions[self.current[&event_type]].schema
    }

    /// The fingerprint this codec writes `event_type` with.
    pub fn fingerprint(&self, event_type: EventType) -> Fingerprint {
        self.versions[self.current[&event_type]].fingerprint
    }

    /// Encodes an event as an Avro single-object message.
    pub fn encode(&self, event: &Event) -> Result<Vec<u8>> {
        let event_type = event.event_type();
        let version = &self.versions[self.current[&event_type]];
        let encode_error = |message: String| Error::Encode {
            event_type: event_type.name(),
            event_id: display_id(&event.envelope.event_id),
            message,
        };
        let writer = self
            .writers
            .get(&event_type)
            .ok_or_else(|| encode_error("no writer for this type".to_owned()))?;
        let datum = writer
            .write_value_to_vec(to_avro_value(event))
            .map_err(|e| encode_error(e.to_string()))?;
        let mut out = Vec::with_capacity(HEADER_LEN + datum.len());
        out.extend_from_slice(&SINGLE_OBJECT_MARKER);
        out.extend_from_slice(&version.fingerprint);
        out.extend_from_slice(&datum);
        Ok(out)
    }

    /// Decodes an Avro single-object message written with any known schema
    /// version. Never panics, whatever the bytes.
    pub fn decode(&self, bytes: &[u8]) -> Result<Event> {
        let (_, fp) = self.writer_of(bytes)?;
        if self.direct_sample == Some(fp)
            && let Some(record) = sample_datum::read(&bytes[HEADER_LEN..])
        {
            return Ok(record.to_event());
        }
        self.decode_generic(bytes)
    }

    /// A `GpuSample` message read in place, when it is one written with
    /// the released v1 schema and reads cleanly; `None` for anything else,
    /// which [`Codec::decode`] then decodes (or explains). Not validated.
    pub fn read_sample<'a>(&self, bytes: &'a [u8]) -> Option<SampleRecord<'a>> {
        let fp = bytes.get(2..HEADER_LEN)?;
        if bytes[..2] != SINGLE_OBJECT_MARKER || self.direct_sample.is_none_or(|d| d[..] != *fp) {
            return None;
        }
        sample_datum::read(&bytes[HEADER_LEN..])
    }

    /// The schema a single-object message was written with, and its
    /// fingerprint, from the message's header.
    fn writer_of(&self, bytes: &[u8]) -> Result<(&SchemaVersion, Fingerprint)> {
        if bytes.len() < HEADER_LEN {
            return Err(Error::TooShort { len: bytes.len() });
        }
        if bytes[..2] != SINGLE_OBJECT_MARKER {
            return Err(Error::BadMarker {
                found: [bytes[0], bytes[1]],
            });
        }
        let mut fp = [0u8; 8];
        fp.copy_from_slice(&bytes[2..HEADER_LEN]);
        let writer = self
            .by_fingerprint
            .get(&fp)
            .map(|&i| &self.versions[i])
            .ok_or_else(|| Error::UnknownSchema {
                fingerprint: hex(&fp),
            })?;
        Ok((writer, fp))
    }

    /// [`Codec::decode`] through the generic Avro reader alone.
    pub(crate) fn decode_generic(&self, bytes: &[u8]) -> Result<Event> {
        let (writer, fp) = self.writer_of(bytes)?;
        let event_type = writer.event_type;
        let datum_error = |message: String| Error::Datum {
            event_type: event_type.name(),
            message,
        };
        let datum_reader = self
            .readers
            .get(&fp)
            .ok_or_else(|| datum_error("no reader for this schema".to_owned()))?;
        let mut input = ExactInput {
            rest: &bytes[HEADER_LEN..],
            overran: false,
        };
        let value = datum_reader
            .read_value(&mut input)
            .map_err(|e| datum_error(e.to_string()))?;
        if input.overran {
            return Err(datum_error(
                "the message ends before the record does (truncated)".to_owned(),
            ));
        }
        if !input.rest.is_empty() {
            return Err(datum_error(format!(
                "{} bytes left over after the record",
                input.rest.len()
            )));
        }
        from_avro_value(event_type, value)
    }
}

/// The datum bytes, noting any attempt to read past their end. The Avro
/// library reads a union index that hits the end of input as `null`, so a
/// message cut just before trailing optional fields would otherwise decode
/// with those fields silently dropped.
struct ExactInput<'a> {
    rest: &'a [u8],
    overran: bool,
}

impl std::io::Read for ExactInput<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.rest.is_empty() && !buf.is_empty() {
            self.overran = true;
        }
        self.rest.read(buf)
    }
}

/// The CRC-64-AVRO fingerprint of a schema's parsing canonical form, as
/// the Avro specification defines both.
pub fn fingerprint(schema: &Schema) -> Fingerprint {
    crc64_avro(canonical_form(schema).as_bytes()).to_le_bytes()
}

/// The parsing canonical form of a schema.
///
/// apache-avro 0.22 strips `logicalType` but leaves what remains as an
/// object, `{"type":"long"}`, where the specification's [PRIMITIVES] rule
/// asks for `"long"`; other libraries (fastavro, Java) follow the
/// specification, so their fingerprints would differ from ours. In a
/// canonical form an object whose only member is `type` can only come from
/// that, so it is reduced here.
pub fn canonical_form(schema: &Schema) -> String {
    let mut form = schema.canonical_form();
    for primitive in [
        "null", "boolean", "int", "long", "float", "double", "bytes", "string",
    ] {
        form = form.replace(
            &format!("{{\"type\":\"{primitive}\"}}"),
            &format!("\"{primitive}\""),
        );
    }
    form
}

/// CRC-64-AVRO (the Rabin fingerprint of the Avro specification).
pub fn crc64_avro(data: &[u8]) -> u64 {
    const EMPTY: u64 = 0xc15d_213a_a4d7_a795;
    static TABLE: LazyLock<[u64; 256]> = LazyLock::new(|| {
        let mut table = [0u64; 256];
        for (i, slot) in table.iter_mut().enumerate() {
            let mut fp = i as u64;
            for _ in 0..8 {
                fp = (fp >> 1) ^ (EMPTY & (fp & 1).wrapping_neg());
            }
            *slot = fp;
        }
        table
    });
    data.iter().fold(EMPTY, |fp, &byte| {
        (fp >> 8) ^ TABLE[((fp ^ u64::from(byte)) & 0xff) as usize]
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn to_avro_value(event: &Event) -> Value {
    let env = &event.envelope;
    let mut fields = Vec::with_capacity(24);
    fields.push((
        "event_id".to_owned(),
        Value::String(env.event_id.to_string()),
    ));
    fields.push((
        "event_time".to_owned(),
        Value::TimestampMicros(env.event_time.as_micros()),
    ));
    fields.push(("source".to_owned(), Value::String(env.source.to_string())));
    fields.push(("cluster".to_owned(), Value::String(env.cluster.to_string())));
    event.body.write_avro_fields(&mut fields);
    Value::Record(fields)
}

fn from_avro_value(event_type: EventType, value: Value) -> Result<Event> {
    let unknown_id = String::new();
    let field_error = |event_id: &str, e: crate::avro::FieldError| {
        Error::field(event_type, event_id, e.field, e.message)
    };
    let mut fields = Fields::from_value(value).map_err(|e| field_error(&unknown_id, e))?;
    let event_id: crate::Text = fields
        .take("event_id")
        .map_err(|e| field_error(&unknown_id, e))?;
    let envelope = (|| {
        Ok(Envelope {
            event_time: fields.take("event_time")?,
            source: fields.take("source")?,
            cluster: fields.take("cluster")?,
            event_id: event_id.clone(),
        })
    })()
    .map_err(|e| field_error(&event_id, e))?;
    let body = EventBody::read_avro_fields(event_type, &mut fields)
        .map_err(|e| field_error(&event_id, e))?;
    Ok(Event { envelope, body })
}

/// The CloudEvents header holding the event's `event_id`.
pub const EVENT_ID_HEADER: &str = "ce_id";

/// CloudEvents Kafka binary-mode headers for an event: `ce_specversion`,
/// `ce_id`, `ce_type` (`gpuledger.<Type>`), `ce_source`, `ce_time`, and
/// `content-type`.
pub fn cloud_event_headers(event: &Event) -> [(&'static str, String); 6] {
    [
        ("ce_specversion", "1.0".to_owned()),
        (EVENT_ID_HEADER, event.envelope.event_id.to_string()),
        (
            "ce_type",
            format!("gpuledger.{}", event.event_type().name()),
        ),
        ("ce_source", event.envelope.source.to_string()),
        ("ce_time", event.envelope.event_time.to_string()),
        ("content-type", "application/avro".to_owned()),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_form_reduces_logical_types_to_their_primitive() {
        let schema = Codec::builtin().schema(EventType::Clock);
        assert_eq!(
            canonical_form(schema),
            r#"{"name":"gpuledger.Clock","type":"record","fields":[{"name":"event_id","type":"string"},{"name":"event_time","type":"long"},{"name":"source","type":"string"},{"name":"cluster","type":"string"},{"name":"pool","type":"string"},{"name":"now","type":["null","long"]}]}"#
        );
        // The same fingerprint fastavro 1.13 computes for Clock.avsc
        // (`fastavro.schema.fingerprint(…, "CRC-64-AVRO")`).
        assert_eq!(hex(&fingerprint(schema)), "6fdcf4ac671cbf4f");
    }

    #[test]
    fn crc64_avro_of_nothing_is_the_empty_constant() {
        assert_eq!(crc64_avro(b""), 0xc15d_213a_a4d7_a795);
    }
}
