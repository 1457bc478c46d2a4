//! Tenant isolation in the query service: a team lead's token reads only
//! its tenant's rows, whatever the SQL does. The worked example (three
//! tenants) goes through the real broker and processor into the history;
//! then every bypass attempt below runs as team-search's lead and must give
//! exactly what an admin gets for the same question asked about
//! team-search alone. Writes and file access are refused for everyone.
//! The same attempts run again over the PostgreSQL wire protocol, from
//! Python's psycopg and from psql, where the password is the token.

use std::time::Duration;

use gpuledger_tests::{
    WorkDir, call, create_topics, eventually, post, require_broker, start_ledger_processor,
    start_query, unique_prefix,
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
    (
        "SELECT p.pool, (SELECT count(*) FROM allocations a WHERE a.pool = p.pool) AS n \
         FROM (SELECT DISTINCT pool FROM ledger_events WHERE pool IS NOT NULL) p ORDER BY 1",
        "SELECT p.pool, (SELECT count(*) FROM allocations a WHERE a.tenant = 'team-search' AND a.pool = p.pool) AS n \
         FROM (SELECT DISTINCT pool FROM ledger_events WHERE tenant = 'team-search' AND pool IS NOT NULL) p ORDER BY 1",
    ),
    (
        "SELECT tenant, job_id, attempt, CAST(cost AS VARCHAR) AS cost FROM job_costs ORDER BY tenant, job_id, attempt",
        "SELECT tenant, job_id, attempt, CAST(cost AS VARCHAR) AS cost FROM job_costs WHERE tenant = 'team-search' ORDER BY tenant, job_id, attempt",
    ),
    (
        "SELECT tenant, CAST(sum(gpu_hours) AS VARCHAR) AS h FROM tenant_usage_hourly GROUP BY tenant ORDER BY tenant",
        "SELECT tenant, CAST(sum(gpu_hours) AS VARCHAR) AS h FROM tenant_usage_hourly WHERE tenant = 'team-search' GROUP BY tenant ORDER BY tenant",
    ),
    (
        "SELECT count(*) AS n FROM utilization",
        "SELECT count(*) AS n FROM utilization WHERE tenant = 'team-search'",
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
    let (mut processor, api) =
        start_ledger_processor(&bootstrap, &prefix, work.path(), ADMIN, "processor.log");
    let query_tokens =
        format!("admin:{ADMIN},finance:{FINANCE},lead:team-search:{LEAD},scheduler:{SCHEDULER}");
    let (mut query, base_url, postgres) = start_query(
        work.path().join("history"),
        &["--api-token", &query_tokens],
        &work.path().join("query.log"),
    );
    let examples = gpuledger_tests::shared_examples();
    let ledger = std::fs::read_to_string(examples.join("mig-quota-basics.ndjson")).unwrap();
    let (status, body) = post(
        &format!("{api}/v1/events?mode=import"),
        Some(ADMIN),
        &ledger,
    );
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

    assert!(ATTEMPTS.len() >= 30);
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

    over_postgres(&postgres, &base_url);
    processor.kill();
    query.kill();
}

/// Runs `queries` (SQL, parameters) over the PostgreSQL protocol with
/// psycopg, logging in with `token`: per query, its rows or its error.
fn pg_as(postgres: &str, token: &str, queries: &[(&str, serde_json::Value)]) -> serde_json::Value {
    let (host, port) = postgres.rsplit_once(':').unwrap();
    let script = gpuledger_tests::interop_script("pg_client.py");
    let input: Vec<serde_json::Value> = queries
        .iter()
        .map(|(sql, params)| serde_json::json!({"sql": sql, "params": params}))
        .collect();
    let mut child = std::process::Command::new(gpuledger_tests::python())
        .arg(&script)
        .args([host, port, token])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("python with psycopg (deploy/local/setup.sh installs it)");
    serde_json::to_writer(child.stdin.take().unwrap(), &input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "pg_client.py failed");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `psql -At -c …` for each command as `token`: its stdout, or its stderr
/// on failure.
fn psql_as(postgres: &str, token: &str, commands: &[&str]) -> Result<String, String> {
    let (host, port) = postgres.rsplit_once(':').unwrap();
    let mut psql = std::process::Command::new("psql");
    psql.args([
        "-h",
        host,
        "-p",
        port,
        "-U",
        "lead",
        "-d",
        "gpuledger",
        "-At",
        "-X",
    ])
    .env("PGPASSWORD", token)
    .env("PGCONNECT_TIMEOUT", "10");
    for command in commands {
        psql.args(["-c", command]);
    }
    let out = psql
        .output()
        .expect("psql (deploy/local/setup.sh installs postgresql-client)");
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The attempts, refusals and logins again, over the PostgreSQL protocol.
fn over_postgres(postgres: &str, base_url: &str) {
    let no_params = || serde_json::Value::Null;
    let lead_queries: Vec<_> = ATTEMPTS
        .iter()
        .map(|(sql, _)| (*sql, no_params()))
        .collect();
    let references: Vec<_> = ATTEMPTS
        .iter()
        .map(|(_, sql)| (*sql, no_params()))
        .collect();
    let seen = pg_as(postgres, LEAD, &lead_queries);
    let expected = pg_as(postgres, ADMIN, &references);
    for (i, (lead_sql, _)) in ATTEMPTS.iter().enumerate() {
        assert!(seen[i].get("error").is_none(), "{lead_sql}: {}", seen[i]);
        assert_eq!(
            seen[i]["rows"], expected[i]["rows"],
            "the lead's {lead_sql:?} over pgwire"
        );
        let text = seen[i].to_string();
        for other in ["team-llm", "team-vision"] {
            assert!(
                !text.contains(other),
                "{lead_sql:?} leaked {other} over pgwire: {text}"
            );
        }
    }
    // The same answers as over HTTP, for one of them.
    let http = sql_as(base_url, Some(LEAD), ATTEMPTS[1].0).unwrap();
    assert_eq!(seen[1]["rows"][0][0], http[0]["n"].to_string());

    // What only the PostgreSQL face has: bound parameters, the catalog
    // tables psql and Grafana read, client settings.
    let team_llm = serde_json::json!(["team-llm"]);
    let pg_only = pg_as(
        postgres,
        LEAD,
        &[
            (
                "SELECT count(*) AS n FROM allocations WHERE tenant = %s",
                team_llm.clone(),
            ),
            (
                "SELECT count(*) AS n FROM allocations WHERE tenant <> %s",
                team_llm,
            ),
            (
                "SELECT relname FROM pg_catalog.pg_class WHERE relname = 'allocations'",
                no_params(),
            ),
            ("SET search_path = public", no_params()),
            ("SET TIME ZONE 'UTC'", no_params()),
            ("SET statement_timeout = '30s'", no_params()),
            ("SELECT count(*) AS n FROM public.allocations", no_params()),
            ("BEGIN", no_params()),
            ("SELECT tenant FROM decisions GROUP BY tenant", no_params()),
            ("COMMIT", no_params()),
        ],
    );
    assert_eq!(pg_only[0]["rows"], serde_json::json!([["0"]]), "{pg_only}");
    let own = &seen[1]["rows"];
    assert_eq!(&pg_only[1]["rows"], own, "{pg_only}");
    assert_eq!(
        pg_only[2]["rows"],
        serde_json::json!([["allocations"]]),
        "{pg_only}"
    );
    assert_eq!(&pg_only[6]["rows"], own, "{pg_only}");
    assert_eq!(
        pg_only[8]["rows"],
        serde_json::json!([["team-search"]]),
        "{pg_only}"
    );
    for answer in pg_only.as_array().unwrap() {
        assert!(answer.get("error").is_none(), "{pg_only}");
    }

    // Writes, engine settings and files are refused here too, and the
    // connection goes on answering after each.
    for token in [LEAD, ADMIN] {
        let mut queries: Vec<_> = REFUSED.iter().map(|sql| (*sql, no_params())).collect();
        queries.push(("SELECT 1 AS one", no_params()));
        let answers = pg_as(postgres, token, &queries);
        for (i, statement) in REFUSED.iter().enumerate() {
            assert!(
                answers[i].get("error").is_some(),
                "{statement}: {}",
                answers[i]
            );
        }
        assert_eq!(answers[REFUSED.len()]["rows"], serde_json::json!([["1"]]));
    }
    assert!(!std::path::Path::new("/tmp/gpuledger-leak.csv").exists());

    // Logins: an unknown token and a scheduler's are refused; finance
    // reads every tenant.
    for token in ["not-a-token-at-all", SCHEDULER] {
        let refused = pg_as(postgres, token, &[]);
        assert!(refused.get("login_error").is_some(), "{token}: {refused}");
    }
    let finance = pg_as(
        postgres,
        FINANCE,
        &[(
            "SELECT DISTINCT tenant FROM allocations ORDER BY tenant",
            no_params(),
        )],
    );
    assert_eq!(finance[0]["rows"].as_array().unwrap().len(), 3, "{finance}");

    // Grafana's PostgreSQL data source: its macros expand to these
    // predicates and groupings over a timestamptz column.
    let grafana = pg_as(
        postgres,
        LEAD,
        &[
            (
                "SELECT floor(extract(epoch from start)/3600)*3600 AS \"time\", count(*) AS n \
                 FROM allocations \
                 WHERE start BETWEEN '2026-11-01T00:00:00Z' AND '2026-12-01T00:00:00Z' \
                 GROUP BY 1 ORDER BY 1",
                no_params(),
            ),
            (
                "SELECT start AS \"time\", tenant AS metric, slices AS value FROM allocations \
                 WHERE start >= to_timestamp(1793491200) AND start <= to_timestamp(1796083200) \
                 ORDER BY 1",
                no_params(),
            ),
        ],
    );
    let grouped: u64 = grafana[0]["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("{grafana}"))
        .iter()
        .map(|row| row[1].as_str().unwrap().parse::<u64>().unwrap())
        .sum();
    let all_in_november = sql_as(
        base_url,
        Some(LEAD),
        "SELECT count(*) AS n FROM allocations WHERE start >= '2026-11-01T00:00:00Z' AND start < '2026-12-01T00:00:00Z'",
    )
    .unwrap();
    assert_eq!(
        grouped,
        all_in_november[0]["n"].as_u64().unwrap(),
        "{grafana}"
    );
    assert!(grouped > 0);
    assert_eq!(grafana[1]["types"][0], 1184, "timestamptz: {grafana}");
    let metrics = grafana[1]["rows"].as_array().unwrap();
    assert_eq!(metrics.len() as u64, grouped, "{grafana}");
    assert!(
        metrics.iter().all(|row| row[1] == "team-search"),
        "{grafana}"
    );

    // psql: the catalog commands and a query, as the lead.
    let tables = psql_as(postgres, LEAD, &["\\dt"]).unwrap();
    assert!(tables.contains("allocations|table"), "{tables}");
    let columns = psql_as(postgres, LEAD, &["\\d allocations"]).unwrap();
    assert!(columns.contains("tenant|text"), "{columns}");
    assert!(
        columns.contains("start|timestamp with time zone"),
        "{columns}"
    );
    let tenants = psql_as(
        postgres,
        LEAD,
        &["SELECT DISTINCT tenant FROM allocations UNION SELECT DISTINCT tenant FROM decisions"],
    )
    .unwrap();
    assert_eq!(tenants.trim(), "team-search");
    let denied = psql_as(postgres, "not-a-token-at-all", &["SELECT 1"]).unwrap_err();
    assert!(
        denied.contains("password authentication failed"),
        "{denied}"
    );
}
