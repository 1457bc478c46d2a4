"""Reads gpuledger records from Kafka with confluent-kafka and decodes them
with fastavro, knowing nothing of gpuledger but its `.avsc` files.

    consume_telemetry.py BOOTSTRAP TOPIC COUNT SCHEMA_DIR

Every message must carry CloudEvents headers, start with the single-object
marker and a fingerprint of one of the schemas; prints a JSON summary of
what it read (count, types, the sum of `seq` and of `mem_used_bytes`).
"""

import io
import json
import pathlib
import struct
import sys

import fastavro
from confluent_kafka import Consumer
from fastavro.schema import fingerprint, to_parsing_canonical_form


def schemas_by_fingerprint(schema_dir: pathlib.Path):
    out = {}
    for path in sorted(schema_dir.glob("v*/*.avsc")):
        raw = json.loads(path.read_text())
        canonical = to_parsing_canonical_form(raw)
        # fastavro gives the CRC-64-AVRO fingerprint as little-endian hex.
        out[bytes.fromhex(fingerprint(canonical, "CRC-64-AVRO"))] = (raw["name"], fastavro.parse_schema(raw))
    return out


def main(bootstrap: str, topic: str, count: int, schema_dir: str) -> int:
    schemas = schemas_by_fingerprint(pathlib.Path(schema_dir))
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"interop-{topic}",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    summary = {"count": 0, "types": {}, "sum_seq": 0, "sum_mem_used_bytes": 0}
    idle = 0
    while summary["count"] < count and idle < 30:
        message = consumer.poll(1.0)
        if message is None:
            idle += 1
            continue
        if message.error():
            raise RuntimeError(message.error())
        headers = {k: v.decode() for k, v in (message.headers() or [])}
        value = message.value()
        assert value[:2] == b"\xc3\x01", f"offset {message.offset()}: no single-object marker"
        name, schema = schemas[value[2:10]]
        assert headers.get("ce_type") == f"gpuledger.{name}", f"ce_type {headers.get('ce_type')} for {name}"
        for key in ("ce_specversion", "ce_id", "ce_source", "ce_time"):
            assert key in headers, f"header {key} missing"
        record = fastavro.schemaless_reader(io.BytesIO(value[10:]), schema, None)
        assert headers["ce_id"] == record["event_id"]
        summary["count"] += 1
        summary["types"][name] = summary["types"].get(name, 0) + 1
        summary["sum_seq"] += record.get("seq", 0)
        summary["sum_mem_used_bytes"] += record.get("mem_used_bytes", 0)
    consumer.close()
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]))
