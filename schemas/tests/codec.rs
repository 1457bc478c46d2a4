//! Round trips, schema evolution and hostile input for the wire codec and
//! the JSON form.

use gpuledger_schemas::events::JobEvent;
use gpuledger_schemas::samples::one_of_each;
use gpuledger_schemas::wire::{HEADER_LEN, SINGLE_OBJECT_MARKER, fingerprint};
use gpuledger_schemas::{Codec, Error, Event, EventBody, EventType, cloud_event_headers};
use proptest::prelude::*;

#[test]
fn samples_cover_every_event_type_and_are_valid() {
    let types: Vec<EventType> = one_of_each().iter().map(Event::event_type).collect();
    assert_eq!(types, EventType::ALL);
    for event in one_of_each() {
        event.validate().unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn every_event_round_trips_through_avro() {
    let codec = Codec::builtin();
    for event in one_of_each() {
        let bytes = codec.encode(&event).unwrap();
        assert_eq!(bytes[..2], SINGLE_OBJECT_MARKER);
        assert_eq!(bytes[2..HEADER_LEN], codec.fingerprint(event.event_type()));
        assert_eq!(codec.decode(&bytes).unwrap(), event);
    }
}

#[test]
fn every_event_round_trips_through_json() {
    for event in one_of_each() {
        let text = event.to_json_string();
        assert!(
            text.starts_with(&format!("{{\"type\":\"{}\"", event.event_type().name())),
            "{text}"
        );
        assert_eq!(Event::from_json_str(&text).unwrap(), event, "{text}");
    }
}

#[test]
fn json_matches_the_contract_example() {
    let line = r#"{"type":"JobEvent","event_id":"j-17-1-start","event_time":"2026-11-03T08:00:00Z",
        "source":"slurm-prolog","cluster":"c1","pool":"h200","job_id":"j-17","attempt":1,
        "tenant":"team-a","state":"started","devices":["MIG-1f0c"],"some_future_field":42}"#;
    let event = Event::from_json_str(line).unwrap();
    assert_eq!(event.key(), "h200");
    let EventBody::JobEvent(job) = &event.body else {
        panic!("not a JobEvent")
    };
    assert_eq!(job.state.as_str(), "started");
    assert_eq!(job.devices.as_deref(), Some(&["MIG-1f0c".to_owned()][..]));
    assert_eq!(
        event.envelope.event_time.to_string(),
        "2026-11-03T08:00:00Z"
    );
}

#[test]
fn cloud_event_headers_name_the_type() {
    let event = &one_of_each()[3];
    let headers = cloud_event_headers(event);
    let get = |k: &str| {
        headers
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(get("ce_type"), Some("gpuledger.JobEvent"));
    assert_eq!(get("ce_id"), Some("j-17-1-done"));
    assert_eq!(get("ce_specversion"), Some("1.0"));
    assert_eq!(get("ce_time"), Some("2026-11-03T18:00:00Z"));
    assert_eq!(get("ce_source"), Some("slurm-epilog"));
}

fn json_error(line: &str) -> Error {
    Event::from_json_str(line).unwrap_err()
}

#[test]
fn json_errors_name_the_event_the_id_and_the_field() {
    let err = json_error(
        r#"{"type":"JobEvent","event_id":"j-1","event_time":"2026-11-03T08:00:00Z","source":"s","cluster":"c","job_id":"j","attempt":1,"tenant":"t","state":"started"}"#,
    );
    assert_eq!(
        err.to_string(),
        "JobEvent \"j-1\": field `pool` is required"
    );

    let err = json_error(
        r#"{"type":"JobEvent","event_id":"j-1","event_time":"2026-11-03T08:00:00Z","source":"s","cluster":"c","pool":"p","job_id":"j","attempt":1,"tenant":"t","state":"running"}"#,
    );
    assert_eq!(err.field_name(), Some("state"));
    assert!(
        err.to_string().contains("unknown value \"running\""),
        "{err}"
    );
    assert!(
        err.to_string().contains("submitted, started, completed"),
        "{err}"
    );

    let err = json_error(
        r#"{"type":"JobEvent","event_id":"j-1","event_time":"yesterday","source":"s","cluster":"c"}"#,
    );
    assert_eq!(err.field_name(), Some("event_time"));

    let err = json_error(
        r#"{"type":"NodeInventory","event_id":"n-1","event_time":"2026-11-03T08:00:00Z","source":"s","cluster":"c","pool":"p","node":"n","devices":[{"device_uuid":"G","model":"m","slices":"x","max_slices":7,"memory_bytes":1}]}"#,
    );
    assert_eq!(err.field_name(), Some("devices[0].slices"));

    assert!(matches!(
        json_error(r#"{"type":"JobEvnt"}"#),
        Error::UnknownType { .. }
    ));
    assert!(matches!(
        json_error(r#"{"event_id":"x"}"#),
        Error::MissingType
    ));
    assert!(matches!(json_error("[1,2]"), Error::NotAnObject { .. }));
    assert!(matches!(json_error("{\"type\":"), Error::NotJson { .. }));
    let err = json_error(
        r#"{"type":"TenantPolicy","event_id":"p","event_time":"2026-11-03T08:00:00Z","source":"s","cluster":"c","pool":"p","tenant":"t","nominal_ge":"1/2","burst_ge":0,"enforcement":"deny"}"#,
    );
    assert_eq!(err.field_name(), Some("nominal_ge"));
}

fn invalid(event: &Event, mutate: impl FnOnce(&mut EventBody)) -> Error {
    let mut event = event.clone();
    mutate(&mut event.body);
    event.validate().unwrap_err()
}

#[test]
fn validation_names_event_id_and_field() {
    let samples = one_of_each();
    let err = invalid(&samples[0], |b| {
        if let EventBody::NodeInventory(n) = b {
            n.devices[1].slices = 8;
        }
    });
    assert_eq!(
        err.to_string(),
        "NodeInventory \"inv-1\": field `devices[1].slices` 8 exceeds max_slices 7 (a device is at most one whole GPU)"
    );
    let err = invalid(&samples[0], |b| {
        if let EventBody::NodeInventory(n) = b {
            n.devices[1].model = "NVIDIA A100".into();
        }
    });
    assert_eq!(err.field_name(), Some("devices[1].model"));
    let err = invalid(&samples[5], |b| {
        if let EventBody::ReservationRequest(r) = b {
            r.end = r.start;
        }
    });
    assert_eq!(err.field_name(), Some("end"));
    let err = invalid(&samples[3], |b| {
        if let EventBody::JobEvent(j) = b {
            j.attempt = 0;
        }
    });
    assert_eq!(
        err.to_string(),
        "JobEvent \"j-17-1-done\": field `attempt` must be at least 1, got 0"
    );
    let err = invalid(&samples[3], |b| {
        if let EventBody::JobEvent(j) = b {
            j.devices = Some(vec!["GPU-a".into(), " ".into()]);
        }
    });
    assert_eq!(
        err.to_string(),
        "JobEvent \"j-17-1-done\": field `devices[1]` must not be empty"
    );
    let err = invalid(&samples[9], |b| {
        if let EventBody::UsageRecord(u) = b {
            std::mem::swap(&mut u.start, &mut u.end);
        }
    });
    assert_eq!(err.field_name(), Some("end"));
    let err = invalid(&samples[12], |b| {
        if let EventBody::GpuSample(s) = b {
            s.mem_util_pct = Some(140.0);
        }
    });
    assert_eq!(err.field_name(), Some("mem_util_pct"));
    // Requests may span several GPUs: 14/7 is two whole H200s.
    samples[4].validate().unwrap();
    let mut no_id = samples[11].clone();
    no_id.envelope.event_id = "".into();
    assert_eq!(
        no_id.validate().unwrap_err().to_string(),
        "Clock (no event_id): field `event_id` must not be empty"
    );
}

/// JobEvent as a newer writer would have it: one more optional field.
fn job_event_v2() -> String {
    let v1: serde_json::Value =
        serde_json::from_str(include_str!("../avro/v1/JobEvent.avsc")).unwrap();
    let mut v2 = v1.clone();
    v2["fields"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "name": "queue", "type": ["null", "string"], "default": null
        }));
    v2.to_string()
}

#[test]
fn a_newer_writer_is_read_by_an_older_reader_and_the_reverse() {
    let v2_text = job_event_v2();
    let new_codec = Codec::with_versions(&[(EventType::JobEvent, 2, &v2_text)]).unwrap();
    let old_codec = Codec::builtin();
    let event = one_of_each()
        .into_iter()
        .find(|e| e.event_type() == EventType::JobEvent)
        .unwrap();
    assert_ne!(
        new_codec.fingerprint(EventType::JobEvent),
        old_codec.fingerprint(EventType::JobEvent)
    );

    // Written with v2 (queue = null here, since our Rust type has no such
    // field; write it with a value through the raw datum to be sure the
    // old reader skips it).
    let v2_schema = apache_avro::Schema::parse_str(&v2_text).unwrap();
    let mut value = apache_avro::types::Record::new(&v2_schema).unwrap();
    let old_bytes = old_codec.encode(&event).unwrap();
    let old_value = {
        let v1 = old_codec.schema(EventType::JobEvent);
        let reader = apache_avro::reader::datum::GenericDatumReader::builder(v1)
            .build()
            .unwrap();
        reader.read_value(&mut &old_bytes[HEADER_LEN..]).unwrap()
    };
    let apache_avro::types::Value::Record(fields) = old_value else {
        panic!()
    };
    for (name, v) in fields {
        value.put(&name, v);
    }
    value.put(
        "queue",
        apache_avro::types::Value::Union(1, Box::new("gpu-long".into())),
    );
    let writer = apache_avro::writer::datum::GenericDatumWriter::builder(&v2_schema)
        .build()
        .unwrap();
    let datum = writer.write_value_to_vec(value).unwrap();
    let mut v2_bytes = SINGLE_OBJECT_MARKER.to_vec();
    v2_bytes.extend_from_slice(&fingerprint(&v2_schema));
    v2_bytes.extend_from_slice(&datum);

    // The old reader does not know v2's fingerprint: it is told so clearly…
    assert!(matches!(
        old_codec.decode(&v2_bytes),
        Err(Error::UnknownSchema { .. })
    ));
    // …and a reader that holds both versions resolves v2 bytes to the
    // current Rust type, dropping the field it does not know.
    let v1_reader = Codec::with_versions(&[]).unwrap();
    let both = Codec::with_versions(&[(EventType::JobEvent, 2, &v2_text)]).unwrap();
    assert!(v1_reader.decode(&v2_bytes).is_err());
    assert_eq!(both.decode(&v2_bytes).unwrap(), event);

    // Reverse: v1 bytes read by a v2 reader fill `queue` from its default.
    assert_eq!(new_codec.decode(&old_bytes).unwrap(), event);
    let reader = apache_avro::reader::datum::GenericDatumReader::builder(
        old_codec.schema(EventType::JobEvent),
    )
    .reader_schema(&v2_schema)
    .build()
    .unwrap();
    let resolved = reader.read_value(&mut &old_bytes[HEADER_LEN..]).unwrap();
    let apache_avro::types::Value::Record(fields) = resolved else {
        panic!()
    };
    let queue = fields
        .iter()
        .find(|(n, _)| n == "queue")
        .map(|(_, v)| v.clone());
    assert_eq!(
        queue,
        Some(apache_avro::types::Value::Union(
            0,
            Box::new(apache_avro::types::Value::Null)
        ))
    );
}

#[test]
fn short_and_unmarked_input_gets_typed_errors() {
    let codec = Codec::builtin();
    assert_eq!(codec.decode(&[]).unwrap_err(), Error::TooShort { len: 0 });
    assert_eq!(
        codec.decode(&[0xC3, 0x01, 0, 0]).unwrap_err(),
        Error::TooShort { len: 4 }
    );
    assert!(matches!(
        codec.decode(&[0u8; 12]),
        Err(Error::BadMarker { found: [0, 0] })
    ));
    let mut bytes = codec.encode(&one_of_each()[0]).unwrap();
    bytes.push(0);
    assert!(
        matches!(codec.decode(&bytes), Err(Error::Datum { .. })),
        "trailing byte accepted"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = Codec::builtin().decode(&bytes);
    }

    #[test]
    fn truncated_or_corrupted_messages_give_errors_not_panics(
        index in 0usize..20,
        cut in 0usize..400,
        flip in proptest::option::of((0usize..400, any::<u8>())),
    ) {
        let codec = Codec::builtin();
        let event = &one_of_each()[index];
        let mut bytes = codec.encode(event).unwrap();
        if let Some((at, byte)) = flip {
            let at = HEADER_LEN + at % (bytes.len() - HEADER_LEN);
            bytes[at] ^= byte | 1;
            let _ = codec.decode(&bytes);
        } else {
            let cut = cut % bytes.len();
            prop_assert!(codec.decode(&bytes[..cut]).is_err(), "cut at {} of {} decoded", cut, bytes.len());
        }
    }

    #[test]
    fn job_events_round_trip(attempt in 1i32..1000, units in proptest::option::of(0u64..10_000_000), exit in proptest::option::of(any::<i32>())) {
        let mut event = one_of_each()[3].clone();
        if let EventBody::JobEvent(JobEvent { attempt: a, work_units, exit_code, .. }) = &mut event.body {
            *a = attempt;
            *work_units = units.map(|u| (u as i64).into());
            *exit_code = exit;
        }
        let codec = Codec::builtin();
        prop_assert_eq!(codec.decode(&codec.encode(&event).unwrap()).unwrap(), event.clone());
        prop_assert_eq!(Event::from_json_str(&event.to_json_string()).unwrap(), event);
    }
}
