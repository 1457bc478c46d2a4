"""Interop check of gpuledger's Avro wire format against fastavro.

Given a folder of messages written by gpuledger (`<Type>.bin`, Avro
single-object encoding) with their JSON form (`<Type>.json`), and the folder
of `.avsc` files, this script:

1. checks each message's header: marker C3 01 and the CRC-64-AVRO
   fingerprint of the schema's parsing canonical form, computed here from
   the specification (not taken from gpuledger);
2. decodes the datum with fastavro using only the `.avsc` file and compares
   every field with the JSON form;
3. writes the same record with fastavro as `<Type>.fastavro.bin`, in
   single-object encoding, for gpuledger to decode in turn.

Exit status 0 when every message agrees; otherwise it names the first
disagreement.
"""

import datetime
import io
import json
import pathlib
import struct
import sys
from decimal import Decimal

import fastavro
from fastavro.schema import to_parsing_canonical_form

EMPTY = 0xC15D213AA4D7A795


def _table():
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (EMPTY & -(fp & 1))
        table.append(fp)
    return table


TABLE = _table()


def crc64_avro(data: bytes) -> int:
    """The Rabin fingerprint of the Avro specification (CRC-64-AVRO)."""
    fp = EMPTY
    for byte in data:
        fp = (fp >> 8) ^ TABLE[(fp ^ byte) & 0xFF]
    return fp


def rfc3339_to_micros(text: str) -> int:
    dt = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    delta = dt - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def to_micros(value) -> int:
    if isinstance(value, datetime.datetime):
        delta = value - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return int(value)


def is_timestamp(avro_type) -> bool:
    return isinstance(avro_type, dict) and avro_type.get("logicalType") == "timestamp-micros"


def branch(avro_type):
    """The non-null branch of an optional union, or the type itself."""
    if isinstance(avro_type, list):
        rest = [t for t in avro_type if t != "null"]
        return rest[0]
    return avro_type


def compare(path, avro_type, decoded, expected):
    """Compares a value fastavro decoded with the JSON form's value."""
    if isinstance(avro_type, list):
        if expected is None:
            assert decoded is None, f"{path}: expected null, decoded {decoded!r}"
            return
        avro_type = branch(avro_type)
    assert decoded is not None, f"{path}: decoded null, expected {expected!r}"
    if is_timestamp(avro_type):
        assert to_micros(decoded) == rfc3339_to_micros(expected), f"{path}: {decoded!r} != {expected!r}"
    elif isinstance(avro_type, dict) and avro_type.get("type") == "array":
        assert len(decoded) == len(expected), f"{path}: lengths differ"
        for i, (d, e) in enumerate(zip(decoded, expected)):
            compare(f"{path}[{i}]", avro_type["items"], d, e)
    elif isinstance(avro_type, dict) and avro_type.get("type") == "record":
        for field in avro_type["fields"]:
            name = field["name"]
            compare(f"{path}.{name}", field["type"], decoded.get(name), expected.get(name))
    elif avro_type == "float":
        assert abs(decoded - float(expected)) < 1e-3, f"{path}: {decoded!r} != {expected!r}"
    elif avro_type == "string" and isinstance(expected, (int, float)):
        assert Decimal(decoded) == Decimal(str(expected)), f"{path}: {decoded!r} != {expected!r}"
    else:
        assert decoded == expected, f"{path}: decoded {decoded!r}, expected {expected!r}"


def from_json(avro_type, value):
    """The JSON form's value as fastavro writes it."""
    if isinstance(avro_type, list):
        if value is None:
            return None
        avro_type = branch(avro_type)
    if is_timestamp(avro_type):
        return rfc3339_to_micros(value)
    if isinstance(avro_type, dict) and avro_type.get("type") == "array":
        return [from_json(avro_type["items"], v) for v in value]
    if isinstance(avro_type, dict) and avro_type.get("type") == "record":
        return {f["name"]: from_json(f["type"], value.get(f["name"])) for f in avro_type["fields"]}
    if avro_type == "string" and isinstance(value, (int, float)):
        return str(value)
    return value


def main(messages: pathlib.Path, schemas: pathlib.Path) -> int:
    checked = 0
    for bin_path in sorted(messages.glob("*.bin")):
        if bin_path.name.endswith(".fastavro.bin"):
            continue
        name = bin_path.stem
        raw_schema = json.loads((schemas / f"{name}.avsc").read_text())
        parsed = fastavro.parse_schema(raw_schema)
        canonical = to_parsing_canonical_form(raw_schema)
        fingerprint = struct.pack("<Q", crc64_avro(canonical.encode()))
        data = bin_path.read_bytes()
        assert data[:2] == b"\xc3\x01", f"{name}: no single-object marker"
        assert data[2:10] == fingerprint, f"{name}: fingerprint {data[2:10].hex()} != {fingerprint.hex()}"
        buffer = io.BytesIO(data[10:])
        record = fastavro.schemaless_reader(buffer, parsed, None)
        assert buffer.read() == b"", f"{name}: bytes left after the record"
        expected = json.loads((messages / f"{name}.json").read_text())
        for field in raw_schema["fields"]:
            field_name = field["name"]
            compare(f"{name}.{field_name}", field["type"], record.get(field_name), expected.get(field_name))

        out = io.BytesIO()
        out.write(b"\xc3\x01" + fingerprint)
        fastavro.schemaless_writer(out, parsed, from_json(raw_schema, expected))
        (messages / f"{name}.fastavro.bin").write_bytes(out.getvalue())
        checked += 1
    print(f"fastavro {fastavro.__version__}: {checked} messages decoded and re-encoded")
    return 0 if checked else 1


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])))
