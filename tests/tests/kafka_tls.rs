//! TLS on every listener, and SCRAM for PostgreSQL logins.
//!
//! `openssl` makes a CA and a server certificate for `localhost` and
//! 127.0.0.1 in the test. The query service's HTTP face and the control
//! API then answer `curl --cacert` over HTTPS and refuse plaintext HTTP;
//! its PostgreSQL face answers `psql "sslmode=verify-full"` and psycopg
//! with `require_auth=scram-sha-256`, logs the login as SCRAM over TLS, and
//! refuses a client that does not ask for TLS, and a wrong token.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use gpuledger_tests::{
    WorkDir, create_topics, generate_history, interop_script, python, require_broker,
    start_processor, start_query, unique_prefix,
};

const ADMIN: &str = "admin-secret-tls";
const LEAD: &str = "lead-secret-tls-search";

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (Debian's openssl package)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A CA (`ca.pem`) and a server certificate for localhost and 127.0.0.1
/// signed by it (`server.pem`, `server.key`), in `dir`.
fn certificates(dir: &Path) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=gpuledger test CA",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        dir.join("san.ext"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "2",
            "-extfile",
            "san.ext",
        ],
    );
}

/// `curl` with `args`: whether it succeeded, and its output.
fn curl(args: &[&str]) -> (bool, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .output()
        .expect("curl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// `psql` with `conninfo` and the query: whether it succeeded, and its output.
fn psql(conninfo: &str, token: &str, sql: &str) -> (bool, String) {
    let out = Command::new("psql")
        .args([conninfo, "-At", "-X", "-c", sql])
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_every_listener_takes_tls_and_postgres_logins_use_scram() {
    let work = WorkDir::new("tls");
    certificates(work.path());
    let (cert, key, ca) = (
        work.path().join("server.pem"),
        work.path().join("server.key"),
        work.path().join("ca.pem"),
    );
    let (cert, key, ca) = (
        cert.to_str().unwrap(),
        key.to_str().unwrap(),
        ca.to_str().unwrap(),
    );

    // The query service over a small generated history.
    let history = work.path().join("history");
    generate_history(&history, 1, "2026-11-30", 1);
    let tokens = format!("admin:{ADMIN},lead:team-search:{LEAD}");
    let (mut query, base_url, postgres) = start_query(
        &history,
        &["--api-token", &tokens, "--tls-cert", cert, "--tls-key", key],
        &work.path().join("query.log"),
    );
    assert!(base_url.starts_with("https://"), "{base_url}");
    let port = base_url.rsplit(':').next().unwrap();
    let https = format!("https://localhost:{port}");

    let (ok, out) = curl(&["--cacert", ca, &format!("{https}/healthz")]);
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "ok");
    let (ok, out) = curl(&[
        "--cacert",
        ca,
        "-H",
        &format!("Authorization: Bearer {LEAD}"),
        "--data-binary",
        "SELECT DISTINCT tenant FROM allocations",
        &format!("{https}/v1/sql"),
    ]);
    assert!(ok, "{out}");
    assert_eq!(out, r#"[{"tenant":"team-search"}]"#);
    // Plaintext HTTP, and a client that does not trust the CA, are refused.
    let (ok, out) = curl(&[&format!("http://127.0.0.1:{port}/healthz")]);
    assert!(!ok, "plaintext HTTP answered: {out}");
    let (ok, out) = curl(&[&format!("{https}/healthz")]);
    assert!(!ok, "an unknown CA was trusted: {out}");

    // PostgreSQL: TLS verified against the CA, SCRAM for the token.
    let (host, pg_port) = postgres.rsplit_once(':').unwrap();
    assert_eq!(host, "127.0.0.1");
    let secure = format!(
        "host=localhost port={pg_port} dbname=gpuledger user=lead sslmode=verify-full sslrootcert={ca}"
    );
    let (ok, out) = psql(&secure, LEAD, "SELECT DISTINCT tenant FROM decisions");
    assert!(ok, "{out}");
    assert_eq!(out.trim(), "team-search");
    let (ok, out) = psql(&secure, "not-a-token-at-all", "SELECT 1");
    assert!(!ok);
    assert!(out.contains("password authentication failed"), "{out}");
    let plain = format!("host=127.0.0.1 port={pg_port} dbname=gpuledger user=lead sslmode=disable");
    let (ok, out) = psql(&plain, LEAD, "SELECT 1");
    assert!(!ok, "a plaintext login was let in: {out}");
    assert!(out.contains("TLS connections only"), "{out}");
    // psycopg's libpq insists on SCRAM and a verified server.
    let input = serde_json::json!([{"sql": "SELECT count(*) FROM allocations WHERE tenant <> 'team-search'"}]);
    let mut child = Command::new(python())
        .arg(interop_script("pg_client.py"))
        .args(["localhost", pg_port, LEAD])
        .arg(format!(
            "sslmode=verify-full sslrootcert={ca} require_auth=scram-sha-256"
        ))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    serde_json::to_writer(child.stdin.take().unwrap(), &input).unwrap();
    let answer: serde_json::Value =
        serde_json::from_slice(&child.wait_with_output().unwrap().stdout).unwrap();
    assert_eq!(answer[0]["rows"], serde_json::json!([["0"]]), "{answer}");
    query.kill();
    let log = std::fs::read_to_string(work.path().join("query.log")).unwrap();
    assert!(
        log.lines().any(|l| l.contains("PostgreSQL login")
            && l.contains("scram-sha-256")
            && l.contains("tls=true")),
        "no SCRAM login over TLS in the log"
    );
    assert!(!log.contains(LEAD), "the log shows a token");

    // The control API.
    let bootstrap = require_broker();
    let prefix = unique_prefix("tls");
    create_topics(&bootstrap, &prefix, 1).await;
    let admin_token = format!("admin:{ADMIN}");
    let mut processor = start_processor(
        &bootstrap,
        &prefix,
        work.path(),
        &[
            "--api-token",
            &admin_token,
            "--tls-cert",
            cert,
            "--tls-key",
            key,
        ],
        "processor.log",
    );
    let api = processor.wait_for_line("control API listening on ", Duration::from_secs(60));
    assert!(api.starts_with("https://"), "{api}");
    let api_port = api.rsplit(':').next().unwrap();
    let (ok, out) = curl(&[
        "--cacert",
        ca,
        &format!("https://localhost:{api_port}/healthz"),
    ]);
    assert!(ok, "{out}");
    let (ok, out) = curl(&[&format!("http://127.0.0.1:{api_port}/healthz")]);
    assert!(!ok, "the control API answered plaintext: {out}");
    processor.kill();
}
