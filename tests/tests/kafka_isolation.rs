//! Tenant isolation in the query service: a team lead's token reads only
//! its tenant's rows, whatever the SQL does. The worked example (three
//! tenants) goes through the real broker and processor into the history;
//! then every bypass attempt below runs as team-search's lead and must give
//! exactly what an admin gets for the same question asked about
//! team-search alone. Writes and file access are refused for everyone.

use std::time::Duration;

use gpuledger_tests::{
    Service, WorkDir, call, create_topics, eventually, post, require_broker, start_processor,
    unique_prefix,
};

const ADMIN: &str = "admin-secret-isolation";
const FINANCE: &str = "finance-secret-isolation";
const LEAD: &str = "lead-secret-team-search";
const SCHEDULER: &str = "scheduler-secret-isolation";

/// `POST /v1/sql` as `token`: the rows, or the status and message.
fn sql_as(
    base_url: &str,
    token: Option<&str>,
    query: &str,
) -> Result<serde_json::Value, (u16, String)> {
    let mut request = ureq::post(&format!("{base_url}/v1/sql"));
    if let Some(token) = token {
        request = request.set("Authorization", &format!("Bearer {token}"));
    }
    match request.send_string(query) {
        Ok(r) => Ok(r.into_json().unwrap()),
        Err(ureq::Error::Status(code, r)) => Err((code, r.into_string().unwrap_or_default())),
        Err(e) => panic!("{e}"),
    }
}

/// (what the lead asks, what an admin asks for team-search alone)
const ATTEMPTS: &[(&str, &str)] = &[
    (
        "SELECT tenant, job_id, attempt, kind FROM allocations ORDER BY job_id, start",
        "SELECT tenant, job_id, attempt, kind FROM allocations WHERE tenant = 'team-search' ORDER BY job_id, start",
    ),
    (
        "SELECT count(*) AS n FROM allocations",
        "SELECT count(*) AS n FROM allocations WHERE tenant = 'team-search'",
    ),
    (
        "SELECT count(*) AS n FROM ledger_events",
        "SELECT count(*) AS n FROM ledger_events WHERE tenant = 'team-search'",
    ),
    (
        "SELECT count(*) AS n FROM decisions",
        "SELECT count(*) AS n FROM decisions WHERE tenant = 'team-search'",
    ),
    (
        "SELECT DISTINCT tenant FROM decisions ORDER BY tenant",
        "SELECT DISTINCT tenant FROM decisions WHERE tenant = 'team-search' ORDER BY tenant",
    ),
    (
        "SELECT tenant FROM allocations UNION SELECT tenant FROM decisions ORDER BY tenant",
        "SELECT tenant FROM allocations WHERE tenant = 'team-search' UNION SELECT tenant FROM decisions WHERE tenant = 'team-search' ORDER BY tenant",
    ),
    (
        "SELECT job_id FROM allocations WHERE tenant = 'team-llm'",
        "SELECT job_id FROM allocations WHERE tenant = 'team-llm' AND tenant = 'team-search'",
    ),
    (
        "WITH x AS (SELECT * FROM allocations) SELECT count(*) AS n FROM x",
        "WITH x AS (SELECT * FROM allocations WHERE tenant = 'team-search') SELECT count(*) AS n FROM x",
    ),
    (
        "SELECT count(*) AS n FROM (SELECT * FROM decisions) d",
        "SELECT count(*) AS n FROM (SELECT * FROM decisions WHERE tenant = 'team-search') d",
    ),
    (
        "SELECT (SELECT count(*) FROM allocations) AS n",
        "SELECT (SELECT count(*) FROM allocations WHERE tenant = 'team-search') AS n",
    ),
    (
        "SELECT count(*) AS n FROM decisions WHERE EXISTS (SELECT 1 FROM allocations WHERE allocations.tenant = 'team-llm')",
        "SELECT count(*) AS n FROM decisions WHERE tenant = 'team-search' AND EXISTS (SELECT 1 FROM allocations WHERE tenant = 'team-search' AND tenant = 'team-llm')",
    ),
    (
        "SELECT count(*) AS n FROM ledger_events WHERE job_id IN (SELECT job_id FROM allocations WHERE tenant = 'team-llm')",
        "SELECT count(*) AS n FROM ledger_events WHERE tenant = 'team-search' AND job_id IN (SELECT job_id FROM allocations WHERE tenant = 'team-llm' AND tenant = 'team-search')",
    ),
    (
        "SELECT count(*) AS n FROM allocations a JOIN decisions d ON a.job_id = d.job_id",
        "SELECT count(*) AS n FROM allocations a JOIN decisions d ON a.job_id = d.job_id WHERE a.tenant = 'team-search' AND d.tenant = 'team-search'",
    ),
    (
        "SELECT count(*) AS n FROM allocations a, allocations b",
        "SELECT count(*) AS n FROM allocations a, allocations b WHERE a.tenant = 'team-search' AND b.tenant = 'team-search'",
    ),
    (
        "SELECT tenant, line, CAST(amount AS VARCHAR) AS amount FROM chargeback WHERE period = '2026-11' ORDER BY tenant, line",
        "SELECT tenant, line, CAST(amount AS VARCHAR) AS amount FROM chargeback WHERE period = '2026-11' AND tenant = 'team-search' ORDER BY tenant, line",
    ),
    (
        "SELECT period, tenant, CAST(total AS VARCHAR) AS total FROM statements ORDER BY period, tenant",
        "SELECT period, tenant, CAST(total AS VARCHAR) AS total FROM statements WHERE tenant = 'team-search' ORDER BY period, tenant",
    ),
    (
        "SELECT CAST(sum(amount) AS VARCHAR) AS s FROM chargeback WHERE line = 'total' AND period = '2026-11'",
        "SELECT CAST(sum(amount) AS VARCHAR) AS s FROM chargeback WHERE line = 'total' AND period = '2026-11' AND tenant = 'team-search'",
    ),
    (
        "SELECT COUNT(*) AS n FROM ALLOCATIONS",
        "SELECT count(*) AS n FROM allocations WHERE tenant = 'team-search'",
    ),
    (
        "SELECT count(*) AS n FROM \"allocations\"",
        "SELECT count(*) AS n FROM allocations WHERE tenant = 'team-search'",
    ),
    (
        "SELECT count(*) AS n FROM datafusion.public.allocations",
        "SELECT count(*) AS n FROM allocations WHERE tenant = 'team-search'",
    ),
    (
        "SELECT count(*) OVER () AS n FROM allocations LIMIT 1",
        "SELECT count(*) OVER () AS n FROM allocations WHERE tenant = 'team-search' LIMIT 1",
    ),
    (
        "SELECT tenant, count(*) AS n FROM ledger_events GROUP BY tenant ORDER BY tenant",
        "SELECT tenant, count(*) AS n FROM ledger_events WHERE tenant = 'team-search' GROUP BY tenant ORDER BY tenant",
    ),
    (
        "SELECT count(*) AS n FROM allocations WHERE tenant = 'team-llm' OR true",
        "SELECT count(*) AS n FROM allocations WHERE tenant = 'team-search'",
    ),
    (
        "SELECT count(*) AS n FROM ledger_events WHERE tenant IS NULL",
        "SELECT count(*) AS n FROM ledger_events WHERE tenant = 'team-search' AND tenant IS NULL",
    ),
    (
        "SELECT tenant FROM decisions EXCEPT SELECT 'nobody' ORDER BY tenant",
        "SELECT tenant FROM decisions WHERE tenant = 'team-search' EXCEPT SELECT 'nobody' ORDER BY tenant",
    ),
    (
        "SELECT tenant FROM decisions INTERSECT SELECT tenant FROM allocations",
        "SELECT tenant FROM decisions WHERE tenant = 'team-search' INTERSECT SELECT tenant FROM allocations WHERE tenant = 'team-search'",
    ),
    (
        "SELECT tenant FROM allocations ORDER BY tenant DESC LIMIT 100",
        "SELECT tenant FROM allocations WHERE tenant = 'team-search' ORDER BY tenant DESC LIMIT 100",
    ),
    (
        "SELECT count(*) AS n FROM ledger_events WHERE raw LIKE '%team-llm%'",
        "SELECT count(*) AS n FROM ledger_events WHERE tenant = 'team-search' AND raw LIKE '%team-llm%'",
    ),
    (
        "SELECT job_id FROM allocations ORDER BY job_id, start OFFSET 1",
        "SELECT job_id FROM allocations WHERE tenant = 'team-search' ORDER BY job_id, start OFFSET 1",
    ),
    (
        "WITH a AS (SELECT tenant FROM allocations), b AS (SELECT * FROM a) SELECT count(*) AS n FROM b",
        "SELECT count(*) AS n FROM allocations WHERE tenant = 'team-search'",
    ),
    (
        "SELECT count(*) AS n FROM (SELECT unnest(devices) AS d FROM allocations)",
        "SELECT count(*) AS n FROM (SELECT unnest(devices) AS d FROM allocations WHERE tenant = 'team-search')",
    ),
    (
        "SELECT sum(CASE WHEN tenant = 'team-llm' THEN 1 ELSE 0 END) AS n FROM allocations",
        "SELECT sum(CASE WHEN tenant = 'team-llm' THEN 1 ELSE 0 END) AS n FROM allocations WHERE tenant = 'team-search'",
    ),
    (
        "SELECT max(tenant) AS t, min(tenant) AS u FROM decisions",
        "SELECT max(tenant) AS t, min(tenant) AS u FROM decisions WHERE tenant = 'team-search'",
    ),
];

/// Refused for every token: writes, settings, files.
const REFUSED: &[&str] = &[
    "CREATE VIEW leak AS SELECT * FROM allocations",
    "CREATE TABLE leak AS SELECT * FROM allocations",
    "CREATE EXTERNAL TABLE leak STORED AS PARQUET LOCATION '/tmp'",
    "COPY (SELECT * FROM allocations) TO '/tmp/gpuledger-leak.csv'",
    "INSERT INTO allocations SELECT * FROM allocations",
    "DROP TABLE allocations",
    "SET datafusion.execution.batch_size = 1",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_a_team_lead_reads_only_its_tenant() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("isolation");
    create_topics(&bootstrap, &prefix, 2).await;
    let work = WorkDir::new("isolation");
    let tokens = format!("admin:{ADMIN}");
    let mut processor = start_processor(
        &bootstrap,
        &prefix,
        work.path(),
        &[
            "--api-token",
            &tokens,
            "--clock-interval-s",
            "0",
            "--flush-interval-ms",
            "200",
        ],
        "processor.log",
    );
    let api = processor.wait_for_line("control API listening on ", Duration::from_secs(60));
    let query_tokens =
        format!("admin:{ADMIN},finance:{FINANCE},lead:team-search:{LEAD},scheduler:{SCHEDULER}");
    let mut query = Service::start(
        "gpuledger-query",
        &[
            "serve",
            "--history-root",
            work.path().join("history").to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--api-token",
            &query_tokens,
        ],
        &work.path().join("query.log"),
    );
    let base_url = query.wait_for_line("listening on ", Duration::from_secs(30));
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/examples");
    let ledger = std::fs::read_to_string(examples.join("mig-quota-basics.ndjson")).unwrap();
    let (status, body) = post(&format!("{api}/v1/events"), Some(ADMIN), &ledger);
    assert_eq!(status, 200, "{body}");
    eventually(
        "the whole example in history",
        Duration::from_secs(60),
        || {
            let rows = sql_as(
            &base_url,
            Some(ADMIN),
            "SELECT count(*) AS n FROM ledger_events WHERE type = 'Clock' AND event_time >= '2026-12-01T00:00:00Z'",
        )
        .ok()?;
            (rows[0]["n"] == 2).then_some(())
        },
    );

    // The example has all three tenants; the lead sees one.
    let everyone = sql_as(
        &base_url,
        Some(ADMIN),
        "SELECT DISTINCT tenant FROM allocations ORDER BY tenant",
    )
    .unwrap();
    assert_eq!(everyone.as_array().unwrap().len(), 3);
    for (lead_sql, reference) in ATTEMPTS {
        let seen =
            sql_as(&base_url, Some(LEAD), lead_sql).unwrap_or_else(|e| panic!("{lead_sql}: {e:?}"));
        let expected = sql_as(&base_url, Some(ADMIN), reference)
            .unwrap_or_else(|e| panic!("{reference}: {e:?}"));
        assert_eq!(seen, expected, "the lead's {lead_sql:?}");
        let text = seen.to_string();
        for other in ["team-llm", "team-vision"] {
            assert!(!text.contains(other), "{lead_sql:?} leaked {other}: {text}");
        }
    }
    // Metadata is not data: the lead may list tables.
    let tables = sql_as(
        &base_url,
        Some(LEAD),
        "SELECT table_name FROM information_schema.tables WHERE table_name = 'allocations'",
    )
    .unwrap();
    assert_eq!(tables.as_array().unwrap().len(), 1);
    for statement in REFUSED {
        for token in [LEAD, ADMIN] {
            let (status, message) = sql_as(&base_url, Some(token), statement).unwrap_err();
            assert_eq!(status, 400, "{statement}: {message}");
        }
    }
    assert!(!std::path::Path::new("/tmp/gpuledger-leak.csv").exists());

    // Tokens: none is a 401, a scheduler's is a 403, finance reads all.
    assert_eq!(sql_as(&base_url, None, "SELECT 1").unwrap_err().0, 401);
    assert_eq!(
        sql_as(&base_url, Some("not-a-token-at-all"), "SELECT 1")
            .unwrap_err()
            .0,
        401
    );
    assert_eq!(
        sql_as(&base_url, Some(SCHEDULER), "SELECT 1")
            .unwrap_err()
            .0,
        403
    );
    let finance = sql_as(
        &base_url,
        Some(FINANCE),
        "SELECT DISTINCT tenant FROM allocations ORDER BY tenant",
    )
    .unwrap();
    assert_eq!(finance, everyone);

    // Statements: a lead gets its own, without the platform's sums.
    let statement = |token: &str, query: &str| {
        call(
            ureq::get(&format!("{base_url}/v1/statements?period=2026-11{query}")),
            Some(token),
            None,
        )
    };
    let (status, own) = statement(LEAD, "");
    assert_eq!(status, 200, "{own}");
    assert_eq!(own["tenants"].as_array().unwrap().len(), 1);
    assert_eq!(own["tenants"][0]["tenant"], "team-search");
    assert_eq!(own["tenants"][0]["lines"]["total"], "5.56");
    assert!(own.get("platform").is_none(), "{own}");
    assert_eq!(statement(LEAD, "&tenant=team-llm").0, 403);
    let (status, all) = statement(FINANCE, "");
    assert_eq!(status, 200, "{all}");
    assert_eq!(all["tenants"].as_array().unwrap().len(), 3);
    assert_eq!(all["platform"]["total"], "727.34");
    processor.kill();
    query.kill();
}
