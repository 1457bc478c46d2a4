//! What one query may take, against the real query service over a
//! generated history: functions whose output size the caller picks are
//! refused past `--max-value-mb` before they build the value, a query
//! past its own memory (`--query-memory-mb`) fails and the service goes
//! on, an answer past `--max-result-mb` is cut with an error, and a
//! `period` list of a statement view costs no more than the months the
//! history has.

use gpuledger_tests::{WorkDir, generate_history, start_query};

const ADMIN: &str = "admin-secret-limits";
const LEAD: &str = "lead-secret-limits";

/// `POST /v1/sql` as `token`: the status and the whole body, or the error
/// that cut the body short.
fn sql_as(base_url: &str, token: &str, query: &str) -> (u16, Result<String, String>) {
    let request =
        ureq::post(&format!("{base_url}/v1/sql")).set("Authorization", &format!("Bearer {token}"));
    match request.send_string(query) {
        Ok(r) => {
            let status = r.status();
            let mut body = String::new();
            let read = std::io::Read::read_to_string(&mut r.into_reader(), &mut body);
            (status, read.map(|_| body).map_err(|e| e.to_string()))
        }
        Err(ureq::Error::Status(code, r)) => (code, Ok(r.into_string().unwrap_or_default())),
        Err(e) => panic!("{query}: {e}"),
    }
}

#[test]
fn queries_are_bounded_in_value_size_memory_and_answer() {
    let work = WorkDir::new("limits");
    let history = work.path().join("history");
    generate_history(&history, 3, "2026-11-28", 3);
    let tokens = format!("admin:{ADMIN},lead:team-search:{LEAD}");
    let (mut query, base_url, _) = start_query(
        &history,
        &[
            "--api-token",
            &tokens,
            "--max-value-mb",
            "1",
            "--query-memory-mb",
            "64",
            "--max-result-mb",
            "1",
        ],
        &work.path().join("query.log"),
    );

    // Sizes the caller picks: refused before the value is made.
    for sql in [
        "SELECT length(repeat('x', 1500000000)) AS n",
        "SELECT length(repeat(job_id, 100000000)) AS n FROM allocations",
        "SELECT length(lpad('x', 2000000000)) AS n",
        "SELECT length(rpad(tenant, 2000000000, 'y')) AS n FROM allocations",
        "SELECT cardinality(array_repeat(1, 1000000000)) AS n",
    ] {
        let (status, body) = sql_as(&base_url, ADMIN, sql);
        let body = body.unwrap();
        assert_eq!(status, 400, "{sql}: {body}");
        assert!(body.contains("--max-value-mb"), "{sql}: {body}");
        // A lead is told the kind only.
        let (status, body) = sql_as(&base_url, LEAD, sql);
        assert_eq!(status, 400, "{sql}");
        assert!(body.unwrap().contains("error id"), "{sql}");
    }
    // Within the bound, they work as ever.
    let (status, body) = sql_as(&base_url, ADMIN, "SELECT length(repeat('ab', 1000)) AS n");
    assert_eq!((status, body.unwrap()), (200, r#"[{"n":2000}]"#.to_owned()));

    // A query past its own memory fails; the service goes on.
    let (status, body) = sql_as(
        &base_url,
        ADMIN,
        "SELECT length(string_agg(a.raw, ',')) AS n FROM ledger_events a, ledger_events b",
    );
    let body = body.unwrap_or_else(|e| e);
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("Resources exhausted"), "{body}");
    let (status, _) = sql_as(&base_url, ADMIN, "SELECT count(*) AS n FROM samples");
    assert_eq!(status, 200);

    // An answer past its bound is cut with an error, never sent whole.
    let (status, body) = sql_as(&base_url, ADMIN, "SELECT * FROM samples");
    assert_eq!(status, 200);
    let cut = body.expect_err("the answer is cut short");
    assert!(!cut.is_empty());

    // A list of 1,200 periods costs the months that exist.
    let periods: Vec<String> = (0..1200)
        .map(|i| format!("'{}-{:02}'", 2000 + i / 12, 1 + i % 12))
        .collect();
    let sql = format!(
        "SELECT count(DISTINCT period) AS n FROM chargeback WHERE period IN ({})",
        periods.join(", ")
    );
    let (status, body) = sql_as(&base_url, ADMIN, &sql);
    assert_eq!((status, body.unwrap()), (200, r#"[{"n":2}]"#.to_owned()));
    query.kill();
}
