//! A team lead's hostile queries: every way a query's own expressions,
//! errors, plans or exports could carry another tenant's rows out.
//!
//! A generated month of four tenants' history is served by the query
//! service; every query below runs as team-search's lead over HTTP (JSON
//! and CSV), over the PostgreSQL protocol with psycopg (simple and
//! extended protocol) and with psql. Most are built so that they fail,
//! quoting the value, exactly when a row of another tenant reaches an
//! expression (`CAST(CASE WHEN tenant <> 'team-search' THEN tenant … END AS
//! INT)`): with the restriction inside the scan they must succeed. None may
//! show another tenant's name, job id, device uuid or amount, or a history
//! file's path, anywhere in its answer or its error.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use gpuledger_tests::{WorkDir, binary, call, interop_script, python, start_query};

const ADMIN: &str = "admin-secret-hostile";
const LEAD: &str = "lead-secret-hostile-search";
const OWN: &str = "team-search";

/// Every table and view with a `tenant` column.
const TENANT_TABLES: [&str; 13] = [
    "samples",
    "device_hourly",
    "ledger_events",
    "decisions",
    "allocations",
    "reservations",
    "policies",
    "usage_records",
    "chargeback",
    "statements",
    "job_costs",
    "tenant_usage_hourly",
    "utilization",
];

/// `expr` when the row is another tenant's, else `fallback`.
fn other(expr: &str, fallback: &str) -> String {
    format!("CASE WHEN tenant <> '{OWN}' THEN {expr} ELSE {fallback} END")
}

/// The hostile queries: (what it tries, the SQL, whether it must succeed).
/// Each puts its probe where a filter on the lead's tenant merged with the
/// query's own predicates would let it see other tenants' rows (the
/// `WHERE` right over a scan), so each fails against such a filter. The
/// few that must fail here too are refused outright (`EXPLAIN ANALYZE`) or
/// fail on the lead's own rows; their errors are checked like any answer.
fn hostile() -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    let mut add = |what: &str, sql: String, succeeds: bool| {
        out.push((what.to_owned(), sql, succeeds));
    };
    for table in TENANT_TABLES {
        let name = other("tenant || '|' || tenant", "'0'");
        add(
            "cast of another tenant's name",
            format!("SELECT 1 AS x FROM {table} WHERE CAST({name} AS INT) = 0"),
            true,
        );
        add(
            "arrow_cast of another tenant's name",
            format!(
                "SELECT count(*) AS n FROM {table} WHERE arrow_cast({}, 'Int64') > 0",
                other("tenant", "'1'")
            ),
            true,
        );
        add(
            "to_timestamp of another tenant's name",
            format!(
                "SELECT count(*) AS n FROM {table} WHERE to_timestamp({}) IS NOT NULL",
                other("tenant", "'2026-11-01T00:00:00Z'")
            ),
            true,
        );
    }
    let job = other("tenant || '|' || job_id", "'0'");
    let leak = format!("CAST({job} AS INT) = 0");
    let queries = [
        (
            "cast of a job id",
            format!("SELECT job_id FROM allocations WHERE {leak}"),
        ),
        (
            "cast of a decision's raw JSON",
            format!(
                "SELECT count(*) AS n FROM decisions WHERE CAST({} AS INT) = 0",
                other("raw", "'0'")
            ),
        ),
        (
            "cast of a ledger event's raw JSON",
            format!(
                "SELECT count(*) AS n FROM ledger_events WHERE CAST({} AS INT) = 0",
                other("raw", "'0'")
            ),
        ),
        (
            "cast of an allocation's raw JSON",
            format!(
                "SELECT count(*) AS n FROM allocations WHERE CAST({} AS INT) = 0",
                other("raw", "'0'")
            ),
        ),
        (
            "cast of a sample's device",
            format!(
                "SELECT count(*) AS n FROM samples WHERE CAST({} AS INT) = 0",
                other("device_uuid || job_id", "'0'")
            ),
        ),
        (
            "cast of a device list",
            format!(
                "SELECT count(*) AS n FROM allocations WHERE CAST({} AS INT) = 0",
                other("array_to_string(devices, ',')", "'0'")
            ),
        ),
        (
            "cast to a date",
            format!(
                "SELECT count(*) AS n FROM allocations WHERE CAST({} AS DATE) IS NOT NULL",
                other("job_id", "substr(job_id, 1, 0) || '2026-11-01'")
            ),
        ),
        (
            "cast to a decimal",
            format!(
                "SELECT count(*) AS n FROM allocations WHERE CAST({} AS DECIMAL(10, 2)) > 0",
                other("job_id", "'1'")
            ),
        ),
        (
            "cast to a boolean",
            format!(
                "SELECT count(*) AS n FROM decisions WHERE CAST({} AS BOOLEAN)",
                other("tenant", "'true'")
            ),
        ),
        (
            "cast of an amount",
            format!(
                "SELECT count(*) AS n FROM chargeback WHERE CAST({} AS INT) = 0",
                other("tenant || CAST(amount AS VARCHAR)", "'0'")
            ),
        ),
        (
            "cast of a job's cost",
            format!(
                "SELECT count(*) AS n FROM job_costs WHERE CAST({} AS INT) = 0",
                other("job_id || CAST(cost AS VARCHAR)", "'0'")
            ),
        ),
        (
            "cast of a statement total",
            format!(
                "SELECT count(*) AS n FROM statements WHERE CAST({} AS INT) = 0",
                other("tenant || CAST(total AS VARCHAR)", "'0'")
            ),
        ),
        (
            "cast of hourly usage",
            format!(
                "SELECT count(*) AS n FROM tenant_usage_hourly WHERE CAST({} AS INT) = 0",
                other("tenant || pool", "'0'")
            ),
        ),
        (
            "division by zero on another's rows",
            format!(
                "SELECT count(*) AS n FROM allocations WHERE 1 / {} = 1",
                other("0", "1")
            ),
        ),
        (
            "modulo by zero on another's rows",
            format!(
                "SELECT count(*) AS n FROM allocations WHERE slices % {} >= 0",
                other("0", "1")
            ),
        ),
        (
            "integer overflow on another's rows",
            format!(
                "SELECT count(*) AS n FROM allocations WHERE CAST({} AS TINYINT) * 2 = 2",
                other("slices * 1000", "1")
            ),
        ),
        (
            "to_char format from a name",
            format!(
                "SELECT count(*) AS n FROM allocations WHERE to_char(start, {}) IS NOT NULL",
                other("'%' || tenant || '%Q'", "'%Y'")
            ),
        ),
        (
            "regexp from a name",
            format!(
                "SELECT count(*) AS n FROM allocations WHERE regexp_like('a', {})",
                other("'(' || tenant", "'a'")
            ),
        ),
        (
            "regexp_match from a job id",
            format!(
                "SELECT count(*) AS n FROM decisions WHERE regexp_match(job_id, {}) IS NOT NULL",
                other("'[' || job_id", "'.'")
            ),
        ),
        (
            "regexp_replace from raw JSON",
            format!(
                "SELECT count(*) AS n FROM ledger_events WHERE regexp_replace('a', {}, 'b') = 'b'",
                other("'(' || raw", "'a'")
            ),
        ),
        (
            "substring of raw JSON cast",
            format!(
                "SELECT count(*) AS n FROM ledger_events WHERE CAST({} AS INT) = 0",
                other("substr(raw, 1, 60)", "'0'")
            ),
        ),
        (
            "JSON text searched",
            format!(
                "SELECT count(*) AS n FROM ledger_events WHERE raw LIKE '%tenant%' AND CAST({} AS INT) = 0",
                other("raw", "'0'")
            ),
        ),
        (
            "array index from a name",
            format!(
                "SELECT count(*) AS n FROM allocations WHERE make_array(1, 2)[CAST({} AS INT)] = 1",
                other("tenant", "'1'")
            ),
        ),
        (
            "arrow_cast of a device list",
            format!(
                "SELECT count(*) AS n FROM allocations WHERE arrow_cast({}, 'Int32') = 1",
                other("devices[1]", "'1'")
            ),
        ),
        (
            "decode of a name",
            format!(
                "SELECT count(*) AS n FROM allocations WHERE decode({}, 'hex') IS NOT NULL",
                other("tenant", "'00'")
            ),
        ),
        (
            "to_date of a job id",
            format!(
                "SELECT count(*) AS n FROM allocations WHERE to_date({}) IS NOT NULL",
                other("job_id", "'2026-11-01'")
            ),
        ),
        (
            "window over filtered rows",
            format!("SELECT count(*) OVER () AS n FROM allocations WHERE {leak}"),
        ),
        (
            "window ranking over filtered rows",
            format!("SELECT rank() OVER (ORDER BY event_time) AS r FROM decisions WHERE {leak}"),
        ),
        (
            "window frame over filtered rows",
            format!(
                "SELECT sum(slices) OVER (PARTITION BY pool ORDER BY start ROWS 2 PRECEDING) AS s FROM allocations WHERE {leak}"
            ),
        ),
        (
            "CTE",
            format!(
                "WITH a AS (SELECT tenant, job_id FROM allocations WHERE {leak}) SELECT count(*) AS n FROM a"
            ),
        ),
        (
            "nested CTEs",
            format!(
                "WITH a AS (SELECT * FROM decisions WHERE {leak}), b AS (SELECT tenant FROM a) SELECT count(*) AS n FROM b"
            ),
        ),
        (
            "CTE of a union",
            format!(
                "WITH a AS (SELECT tenant, job_id FROM allocations WHERE {leak} UNION ALL SELECT tenant, job_id FROM decisions WHERE {leak}) SELECT count(*) AS n FROM a"
            ),
        ),
        (
            "join",
            format!(
                "SELECT count(*) AS n FROM allocations a JOIN decisions d ON a.job_id = d.job_id WHERE CAST(CASE WHEN d.tenant <> '{OWN}' THEN d.job_id ELSE '0' END AS INT) = 0"
            ),
        ),
        (
            "cross join",
            format!(
                "SELECT count(*) AS n FROM allocations a, decisions b WHERE CAST(CASE WHEN b.tenant <> '{OWN}' THEN b.job_id ELSE '0' END AS INT) = 0"
            ),
        ),
        (
            "scalar subquery",
            format!("SELECT (SELECT count(*) FROM allocations WHERE {leak}) AS n"),
        ),
        (
            "IN subquery",
            format!(
                "SELECT count(*) AS n FROM decisions WHERE job_id IN (SELECT job_id FROM allocations WHERE {leak})"
            ),
        ),
        (
            "EXISTS subquery",
            format!(
                "SELECT 1 AS x WHERE EXISTS (SELECT 1 FROM samples WHERE CAST({} AS INT) = 0)",
                other("device_uuid", "'0'")
            ),
        ),
        (
            "string_agg of filtered names",
            format!(
                "SELECT string_agg(DISTINCT tenant, ',') AS x FROM ledger_events WHERE CAST({} AS INT) = 0",
                other("tenant", "'0'")
            ),
        ),
        (
            "min and max of filtered names",
            format!(
                "SELECT min(tenant) AS a, max(tenant) AS b FROM decisions WHERE CAST({} AS INT) = 0",
                other("tenant", "'0'")
            ),
        ),
        (
            "filter pushed into a view",
            format!(
                "SELECT count(*) AS n FROM utilization WHERE CAST({} AS INT) = 0",
                other("device_uuid", "'0'")
            ),
        ),
        (
            "statement view with a period list",
            format!(
                "SELECT count(*) AS n FROM chargeback WHERE period IN ('2026-10', '2026-11', '2026-12') AND CAST({} AS INT) = 0",
                other("tenant", "'0'")
            ),
        ),
        (
            "OR with another tenant",
            format!("SELECT count(*) AS n FROM allocations WHERE tenant = 'team-vision' OR {leak}"),
        ),
        (
            "limit over a filter",
            format!("SELECT job_id FROM allocations WHERE {leak} LIMIT 3"),
        ),
        (
            "order by over a filter",
            format!("SELECT job_id FROM allocations WHERE {leak} ORDER BY job_id"),
        ),
        (
            "group by over a filter",
            format!("SELECT pool, count(*) AS n FROM allocations WHERE {leak} GROUP BY pool"),
        ),
        (
            "EXPLAIN",
            format!(
                "EXPLAIN SELECT count(*) FROM samples WHERE CAST({} AS INT) = 0",
                other("device_uuid", "'0'")
            ),
        ),
        (
            "EXPLAIN VERBOSE",
            format!("EXPLAIN VERBOSE SELECT count(*) FROM ledger_events WHERE {leak}"),
        ),
        (
            "information_schema tables",
            format!(
                "SELECT table_name FROM information_schema.tables WHERE table_name IN (SELECT job_id FROM allocations WHERE {leak})"
            ),
        ),
        (
            "information_schema columns",
            format!(
                "SELECT column_name FROM information_schema.columns WHERE EXISTS (SELECT 1 FROM decisions WHERE {leak})"
            ),
        ),
        (
            "pg_catalog classes",
            format!(
                "SELECT relname FROM pg_catalog.pg_class WHERE relname IN (SELECT job_id FROM allocations WHERE {leak})"
            ),
        ),
        (
            "pg_catalog namespaces",
            format!(
                "SELECT nspname FROM pg_catalog.pg_namespace WHERE EXISTS (SELECT 1 FROM samples WHERE CAST({} AS INT) = 0)",
                other("job_id", "'0'")
            ),
        ),
    ];
    for (what, sql) in queries {
        add(what, sql, true);
    }
    add(
        "EXPLAIN ANALYZE",
        format!("EXPLAIN ANALYZE SELECT * FROM allocations WHERE tenant <> '{OWN}'"),
        false,
    );
    add(
        "EXPLAIN ANALYZE of a view",
        "EXPLAIN ANALYZE SELECT * FROM chargeback".to_owned(),
        false,
    );
    out
}

/// `gpuledger-processor generate`: twelve days of a 16-GPU fleet of four
/// tenants (reservations and storage use included), written to `root`.
fn generate(root: &Path) {
    let out = Command::new(binary("gpuledger-processor"))
        .args([
            "--log-filter",
            "warn",
            "generate",
            "--gpus",
            "16",
            "--days",
            "12",
        ])
        .args([
            "--interval-s",
            "600",
            "--start",
            "2026-11-20",
            "--seed",
            "11",
        ])
        .args(["--partitions", "1"])
        .arg("--history-root")
        .arg(root)
        .output()
        .expect("gpuledger-processor runs");
    assert!(
        out.status.success(),
        "generate failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `POST /v1/sql` as `token` with `accept`: the status and the body.
fn sql_as(base_url: &str, token: &str, accept: &str, query: &str) -> (u16, String) {
    let request = ureq::post(&format!("{base_url}/v1/sql"))
        .set("Authorization", &format!("Bearer {token}"))
        .set("Accept", accept);
    match request.send_string(query) {
        Ok(r) => (r.status(), r.into_string().unwrap_or_default()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_string().unwrap_or_default()),
        Err(e) => panic!("{query}: {e}"),
    }
}

/// The first column of `query`'s rows as an admin sees them, as text.
fn column(base_url: &str, query: &str) -> BTreeSet<String> {
    let (status, body) = sql_as(base_url, ADMIN, "application/json", query);
    assert_eq!(status, 200, "{query}: {body}");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&body).unwrap();
    rows.iter()
        .filter_map(|row| row.as_object()?.values().next().cloned())
        .map(|v| match v {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        })
        .collect()
}

/// What must never reach the lead: other tenants' names, job ids, device
/// uuids and amounts (those the lead's own rows do not also have), and the
/// history's folder.
struct Secrets(Vec<String>);

impl Secrets {
    fn gather(base_url: &str, history: &Path) -> Secrets {
        let mut secrets = BTreeSet::new();
        let tenants = column(
            base_url,
            &format!("SELECT DISTINCT tenant FROM allocations WHERE tenant <> '{OWN}'"),
        );
        assert!(
            tenants.len() >= 3,
            "the generated fleet has four tenants: {tenants:?}"
        );
        secrets.extend(tenants);
        let own_jobs = column(
            base_url,
            &format!("SELECT DISTINCT job_id FROM decisions WHERE tenant = '{OWN}'"),
        );
        let jobs = column(
            base_url,
            &format!(
                "SELECT DISTINCT job_id FROM decisions WHERE tenant <> '{OWN}' AND job_id IS NOT NULL"
            ),
        );
        assert!(!jobs.is_empty());
        secrets.extend(jobs.difference(&own_jobs).cloned());
        let own_devices = column(
            base_url,
            &format!("SELECT DISTINCT device_uuid FROM samples WHERE tenant = '{OWN}'"),
        );
        let devices = column(
            base_url,
            &format!("SELECT DISTINCT device_uuid FROM samples WHERE tenant <> '{OWN}'"),
        );
        secrets.extend(devices.difference(&own_devices).cloned());
        // Amounts of a hundred or more: short ones could be any number.
        let own_amounts = column(
            base_url,
            &format!(
                "SELECT DISTINCT CAST(amount AS VARCHAR) FROM chargeback WHERE tenant = '{OWN}'"
            ),
        );
        let amounts = column(
            base_url,
            &format!(
                "SELECT DISTINCT CAST(amount AS VARCHAR) FROM chargeback WHERE tenant <> '{OWN}' AND amount >= 100"
            ),
        );
        assert!(
            !amounts.is_empty(),
            "other tenants have amounts of 100 or more"
        );
        secrets.extend(amounts.difference(&own_amounts).cloned());
        // Plans name files relative to the store's root, without the
        // leading slash.
        let root = history.display().to_string();
        secrets.insert(root.trim_start_matches('/').to_owned());
        Secrets(secrets.into_iter().collect())
    }

    /// The first secret `answer` shows, if any.
    fn shown_in<'a>(&'a self, answer: &str) -> Option<&'a str> {
        self.0
            .iter()
            .map(String::as_str)
            .find(|s| answer.contains(s))
    }
}

/// Runs `queries` over psycopg as `token`, by `protocol`.
fn psycopg(
    postgres: &str,
    token: &str,
    protocol: &str,
    queries: &[&str],
) -> Vec<serde_json::Value> {
    let (host, port) = postgres.rsplit_once(':').unwrap();
    let input: Vec<serde_json::Value> = queries
        .iter()
        .map(|sql| serde_json::json!({"sql": sql, "protocol": protocol}))
        .collect();
    let mut child = Command::new(python())
        .arg(interop_script("pg_client.py"))
        .args([host, port, token])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python with psycopg (deploy/local/setup.sh installs it)");
    serde_json::to_writer(child.stdin.take().unwrap(), &input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "pg_client.py failed");
    let answers: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answers.len(), queries.len());
    answers
}

/// `psql -c query` as `token`: whether it succeeded, and everything it
/// printed.
fn psql(postgres: &str, token: &str, query: &str) -> (bool, String) {
    let (host, port) = postgres.rsplit_once(':').unwrap();
    let out = Command::new("psql")
        .args([
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
        .args(["-c", query])
        .env("PGPASSWORD", token)
        .env("PGCONNECT_TIMEOUT", "10")
        .output()
        .expect("psql (deploy/local/setup.sh installs postgresql-client)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_team_lead_sees_no_other_tenant_through_any_query() {
    let work = WorkDir::new("hostile");
    let history = work.path().join("history");
    generate(&history);
    let tokens = format!("admin:{ADMIN},lead:{OWN}:{LEAD}");
    let (mut query, base_url, postgres) = start_query(
        &history,
        &["--api-token", &tokens],
        &work.path().join("query.log"),
    );
    let secrets = Secrets::gather(&base_url, &history.canonicalize().unwrap());
    let queries = hostile();
    assert!(queries.len() >= 60, "{} hostile queries", queries.len());

    let mut failures = Vec::new();
    let mut check = |face: &str, what: &str, sql: &str, succeeds: bool, ok: bool, answer: &str| {
        if let Some(secret) = secrets.shown_in(answer) {
            failures.push(format!(
                "{face}: {what}: {sql}\n  showed {secret:?}: {answer:.300}"
            ));
        } else if ok != succeeds {
            failures.push(format!(
                "{face}: {what}: {sql}\n  {}: {answer:.300}",
                if succeeds { "failed" } else { "succeeded" }
            ));
        }
    };
    for (what, sql, succeeds) in &queries {
        for accept in ["application/json", "text/csv"] {
            let (status, body) = sql_as(&base_url, LEAD, accept, sql);
            check(
                &format!("HTTP {accept}"),
                what,
                sql,
                *succeeds,
                status == 200,
                &body,
            );
        }
    }
    let sqls: Vec<&str> = queries.iter().map(|(_, sql, _)| sql.as_str()).collect();
    for protocol in ["simple", "extended"] {
        let answers = psycopg(&postgres, LEAD, protocol, &sqls);
        for ((what, sql, succeeds), answer) in queries.iter().zip(&answers) {
            let ok = answer.get("error").is_none();
            check(
                &format!("psycopg {protocol}"),
                what,
                sql,
                *succeeds,
                ok,
                &answer.to_string(),
            );
        }
    }
    for (what, sql, succeeds) in &queries {
        let (ok, text) = psql(&postgres, LEAD, sql);
        check("psql", what, sql, *succeeds, ok, &text);
    }

    // The exports and statements, as the lead.
    for path in [
        "/v1/export/focus?period=2026-11&format=csv",
        "/v1/export/focus?period=2026-11&format=json",
        "/v1/statements?period=2026-11",
        "/v1/statements?period=2026-11&format=csv",
        "/v1/statements?period=2026-11&tenant=team-vision",
        "/v1/statements?period=1999-01",
    ] {
        let request =
            ureq::get(&format!("{base_url}{path}")).set("Authorization", &format!("Bearer {LEAD}"));
        let body = match request.call() {
            Ok(r) => r.into_string().unwrap_or_default(),
            Err(ureq::Error::Status(_, r)) => r.into_string().unwrap_or_default(),
            Err(e) => panic!("{path}: {e}"),
        };
        if let Some(secret) = secrets.shown_in(&body) {
            failures.push(format!("GET {path} showed {secret:?}: {body:.300}"));
        }
    }
    let (status, own) = call(
        ureq::get(&format!("{base_url}/v1/statements?period=2026-11")),
        Some(LEAD),
        None,
    );
    assert_eq!(status, 200, "{own}");
    assert_eq!(own["tenants"].as_array().unwrap().len(), 1, "{own}");
    assert!(
        failures.is_empty(),
        "{} of {} answers showed what they must not:\n{}",
        failures.len(),
        queries.len() * 6,
        failures.join("\n")
    );

    // The lead's errors carry an id that the service's log ties to the
    // full text.
    let (status, body) = sql_as(
        &base_url,
        LEAD,
        "application/json",
        "SELECT CAST(job_id AS INT) FROM allocations",
    );
    assert_eq!(status, 400, "{body}");
    let id = body
        .split("error id ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .unwrap_or_else(|| panic!("no error id in {body}"))
        .to_owned();
    query.kill();
    let log = std::fs::read_to_string(work.path().join("query.log")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains(&id) && l.contains("Cannot cast")),
        "the log has no full text for {id}"
    );
}
