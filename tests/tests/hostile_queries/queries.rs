//! The hostile queries of `hostile_queries.rs`: what a team lead tries.

/// The lead's tenant.
pub(crate) const OWN: &str = "team-search";

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
pub(crate) fn hostile() -> Vec<(String, String, bool)> {
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
