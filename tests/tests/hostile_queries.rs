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

use gpuledger_tests::{WorkDir, call, generate_history, interop_script, python, start_query};

const ADMIN: &str = "admin-secret-hostile";
const LEAD: &str = "lead-secret-hostile-search";

#[path = "hostile_queries/queries.rs"]
mod queries;

use queries::{OWN, hostile};

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
    // Twelve days: reservations and storage use included.
    generate_history(&history, 12, "2026-11-20", 11);
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
