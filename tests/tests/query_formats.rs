//! `POST /v1/sql` answers in the format `Accept` asks for, read back by the
//! clients people use: CSV by hand, the Arrow IPC stream by pyarrow, Parquet
//! by pyarrow and DuckDB. A query past the time limit is a 408; a format we
//! do not write is a 406. No broker needed: the queries compute their rows.

use std::io::Read;
use std::process::Command;

use gpuledger_tests::{WorkDir, python, start_query};

/// 10,000 rows: n = 1..10000 and a label.
const ROWS: &str = "SELECT n, concat('row-', CAST(n AS VARCHAR)) AS label FROM (SELECT unnest(range(1, 10001)) AS n) ORDER BY n";

fn ask(base_url: &str, accept: &str, query: &str) -> Result<(String, Vec<u8>), (u16, String)> {
    match ureq::post(&format!("{base_url}/v1/sql"))
        .set("Accept", accept)
        .send_string(query)
    {
        Ok(r) => {
            let content_type = r.content_type().to_owned();
            let mut body = Vec::new();
            r.into_reader().read_to_end(&mut body).unwrap();
            Ok((content_type, body))
        }
        Err(ureq::Error::Status(code, r)) => Err((code, r.into_string().unwrap_or_default())),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn query_answers_in_every_format_and_keeps_its_limits() {
    let work = WorkDir::new("formats");
    let (mut query, base_url, _postgres) = start_query(
        work.path().join("history"),
        &["--query-timeout-s", "2"],
        &work.path().join("query.log"),
    );

    let (content_type, json) = ask(&base_url, "application/json", ROWS).unwrap();
    assert_eq!(content_type, "application/json");
    let json: Vec<serde_json::Value> = serde_json::from_slice(&json).unwrap();
    assert_eq!(json.len(), 10_000);
    assert_eq!(json[41], serde_json::json!({"n": 42, "label": "row-42"}));

    let (content_type, csv) = ask(&base_url, "text/csv", ROWS).unwrap();
    assert_eq!(content_type, "text/csv");
    let csv = String::from_utf8(csv).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 10_001);
    assert_eq!(lines[0], "n,label");
    assert_eq!(lines[42], "42,row-42");

    let (content_type, arrow) =
        ask(&base_url, "application/vnd.apache.arrow.stream", ROWS).unwrap();
    assert_eq!(content_type, "application/vnd.apache.arrow.stream");
    let (content_type, parquet) = ask(&base_url, "application/vnd.apache.parquet", ROWS).unwrap();
    assert_eq!(content_type, "application/vnd.apache.parquet");
    let arrow_path = work.path().join("answer.arrows");
    let parquet_path = work.path().join("answer.parquet");
    std::fs::write(&arrow_path, arrow).unwrap();
    std::fs::write(&parquet_path, parquet).unwrap();
    let repo = gpuledger_tests::repo_root();
    let repo = repo.display();
    let python = python();
    let out = Command::new(&python)
        .arg(format!("{repo}/tests/interop/read_results.py"))
        .arg(&arrow_path)
        .arg(&parquet_path)
        .output()
        .unwrap_or_else(|e| panic!("{} runs (make setup creates it): {e}", python.display()));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(read["arrow_rows"], 10_000);
    assert_eq!(read["arrow_columns"], serde_json::json!(["n", "label"]));
    assert_eq!(
        read["arrow_first"],
        serde_json::json!({"n": 1, "label": "row-1"})
    );
    assert_eq!(read["parquet_rows"], 10_000);
    assert_eq!(read["duckdb_rows"], 10_000);
    assert_eq!(read["duckdb_sum"], 50_005_000);

    // An empty answer still says what its columns are.
    let (_, empty) = ask(&base_url, "text/csv", "SELECT 1 AS one WHERE false").unwrap();
    assert_eq!(String::from_utf8(empty).unwrap(), "one\n");
    let (_, empty) = ask(&base_url, "application/json", "SELECT 1 AS one WHERE false").unwrap();
    assert_eq!(empty, b"[]");

    // A format we do not write, named; a query past its time, stopped.
    let (status, body) = ask(&base_url, "image/png", ROWS).unwrap_err();
    assert_eq!(status, 406, "{body}");
    assert!(body.contains("text/csv"), "{body}");
    let slow = "SELECT count(*) AS n FROM (SELECT unnest(range(1, 3000000)) AS a) \
                CROSS JOIN (SELECT unnest(range(1, 3000000)) AS b)";
    let (status, body) = ask(&base_url, "application/json", slow).unwrap_err();
    assert_eq!(status, 408, "{body}");
    assert!(body.contains("took longer than 2s"), "{body}");
    // The service is still up.
    assert!(ask(&base_url, "application/json", "SELECT 1 AS one").is_ok());
    query.kill();
}
