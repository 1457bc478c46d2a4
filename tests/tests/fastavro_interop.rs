//! Interop with another Avro implementation: Python's fastavro decodes what
//! our codec wrote using only the `.avsc` files, and our codec decodes what
//! fastavro wrote. Needs the project's Python environment (`make test`
//! creates it); set `GPULEDGER_PYTHON` to use another interpreter.

use std::process::Command;

use gpuledger_schemas::Codec;
use gpuledger_schemas::samples::one_of_each;
use gpuledger_tests::python;

#[test]
fn fastavro_reads_our_bytes_and_we_read_fastavros() {
    let repo = gpuledger_tests::repo_root();
    let python = python();
    assert!(
        python.exists(),
        "Python with fastavro not found at {} — run `make setup` (or set GPULEDGER_PYTHON)",
        python.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let codec = Codec::builtin();
    let events = one_of_each();
    for event in &events {
        let name = event.event_type().name();
        std::fs::write(
            dir.path().join(format!("{name}.bin")),
            codec.encode(event).unwrap(),
        )
        .unwrap();
        std::fs::write(
            dir.path().join(format!("{name}.json")),
            event.to_json_string(),
        )
        .unwrap();
    }
    let output = Command::new(&python)
        .arg(repo.join("tests/interop/fastavro_interop.py"))
        .arg(dir.path())
        .arg(repo.join("schemas/avro/v1"))
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "fastavro check failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("{} messages decoded and re-encoded", events.len())),
        "{stdout}"
    );

    for event in &events {
        let name = event.event_type().name();
        let bytes = std::fs::read(dir.path().join(format!("{name}.fastavro.bin"))).unwrap();
        let decoded = codec
            .decode(&bytes)
            .unwrap_or_else(|e| panic!("our codec rejects fastavro's {name}: {e}"));
        assert_eq!(&decoded, event, "{name} differs after fastavro wrote it");
    }
}
