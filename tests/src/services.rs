//! The project's binaries as the tests run them: a scratch folder per
//! test, services started with their logs and stopped on drop, and the
//! processor and query service with the flags most tests share.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{create_topics, require_broker, unique_prefix};

/// Path of a workspace binary, built by `cargo build --workspace`.
pub fn binary(name: &str) -> PathBuf {
    // Test executables live in <target>/<profile>/deps; binaries one up.
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe.parent().and_then(|p| p.parent()).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is not built; run `cargo build --workspace` first (make test does)",
        path.display()
    );
    path
}

/// A scratch folder for a test's data and logs: removed when the test
/// passes, kept (and its path printed) when it fails.
#[derive(Debug)]
pub struct WorkDir(Option<tempfile::TempDir>);

impl WorkDir {
    /// A new folder named after the test.
    pub fn new(name: &str) -> WorkDir {
        let dir = tempfile::Builder::new()
            .prefix(&format!("gpuledger-{name}-"))
            .tempdir()
            .expect("scratch folder");
        WorkDir(Some(dir))
    }

    /// Its path.
    pub fn path(&self) -> &std::path::Path {
        self.0
            .as_ref()
            .map(|d| d.path())
            .expect("work dir is present until drop")
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::thread::panicking()
            && let Some(dir) = self.0.take()
        {
            eprintln!(
                "kept the failed test's data and logs in {}",
                dir.keep().display()
            );
        }
    }
}

/// Starts `gpuledger-processor run` on `bootstrap` with the topics of
/// `prefix`, the consumer group `<prefix>processor`, history and state in
/// `work`'s `history` and `state` folders, the control API on a free port,
/// then the `extra` flags; stderr goes to `log` in `work`.
pub fn start_processor(
    bootstrap: &str,
    prefix: &str,
    work: &std::path::Path,
    extra: &[&str],
    log: &str,
) -> Service {
    let history = work.join("history");
    let state = work.join("state");
    let group = format!("{prefix}processor");
    // One instance, restarted in place as a StatefulSet pod would be.
    let instance = format!("{prefix}processor-0");
    let mut args = vec![
        "run",
        "--group-instance-id",
        &instance,
        "--kafka-bootstrap",
        bootstrap,
        "--topic-prefix",
        prefix,
        "--history-root",
        history.to_str().expect("a UTF-8 path"),
        "--group-id",
        &group,
        "--state-dir",
        state.to_str().expect("a UTF-8 path"),
        "--api-listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    Service::start("gpuledger-processor", &args, &work.join(log))
}

/// Starts a processor for a telemetry test: files roll after 300 ms, so
/// rows show up in the history soon after their records. Returns it and
/// its control API's URL.
pub fn start_telemetry_processor(
    bootstrap: &str,
    prefix: &str,
    work: &std::path::Path,
) -> (Service, String) {
    let extra = ["--flush-interval-ms", "300"];
    let mut processor = start_processor(bootstrap, prefix, work, &extra, "processor.log");
    let api = processor.wait_for_line("control API listening on ", Duration::from_secs(30));
    (processor, api)
}

/// Starts a processor for a ledger test: `admin` may post events, it
/// ticks no clock of its own (the ledger carries its `Clock` events) and
/// flushes history every 200 ms. Returns it and its control API's URL.
pub fn start_ledger_processor(
    bootstrap: &str,
    prefix: &str,
    work: &std::path::Path,
    admin: &str,
    log: &str,
) -> (Service, String) {
    let token = format!("admin:{admin}");
    let extra = [
        "--api-token",
        &token,
        "--clock-interval-s",
        "0",
        "--flush-interval-ms",
        "200",
    ];
    let mut processor = start_processor(bootstrap, prefix, work, &extra, log);
    let api = processor.wait_for_line("control API listening on ", Duration::from_secs(120));
    (processor, api)
}

/// A running child process, killed when dropped.
#[derive(Debug)]
pub struct Service {
    pub name: &'static str,
    child: Child,
}

impl Service {
    /// Starts `name` with `args`; stderr goes to `log`.
    pub fn start(name: &'static str, args: &[&str], log: &std::path::Path) -> Service {
        Self::start_with_env(name, args, &[], log)
    }

    /// [`Service::start`] with `env` added to the environment.
    pub fn start_with_env(
        name: &'static str,
        args: &[&str],
        env: &[(&str, &str)],
        log: &std::path::Path,
    ) -> Service {
        let log = std::fs::File::create(log).expect("log file");
        let child = Command::new(binary(name))
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {name}: {e}"));
        Service { name, child }
    }

    /// Reads stdout lines until one starts with `prefix`; returns the rest.
    pub fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> String {
        self.wait_for_lines(&[prefix], timeout).remove(0)
    }

    /// Reads stdout lines until one has started with each of `prefixes`, in
    /// that order; returns the rest of each. Stdout can be read once.
    pub fn wait_for_lines(&mut self, prefixes: &[&str], timeout: Duration) -> Vec<String> {
        let stdout = self.child.stdout.take().expect("stdout is read once");
        let (tx, rx) = std::sync::mpsc::channel();
        let wanted: Vec<String> = prefixes.iter().map(|p| (*p).to_owned()).collect();
        std::thread::spawn(move || {
            let mut found = Vec::new();
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix(&wanted[found.len()]) {
                    found.push(rest.to_owned());
                    if found.len() == wanted.len() {
                        let _ = tx.send(found);
                        return;
                    }
                }
            }
        });
        rx.recv_timeout(timeout)
            .unwrap_or_else(|_| panic!("{} printed no lines starting with {prefixes:?}", self.name))
    }

    /// Kills it at once (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the query service over `history` on free ports, with `extra`
/// arguments; returns it, its HTTP base URL and its PostgreSQL address
/// (`host:port`).
pub fn start_query(
    history: impl AsRef<std::path::Path>,
    extra: &[&str],
    log: &std::path::Path,
) -> (Service, String, String) {
    let history = history.as_ref().to_str().expect("a UTF-8 path");
    let mut args = vec![
        "serve",
        "--history-root",
        history,
        "--listen",
        "127.0.0.1:0",
        "--pg-listen",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    let mut query = Service::start("gpuledger-query", &args, log);
    let mut bound = query.wait_for_lines(
        &["listening on ", "postgres listening on "],
        Duration::from_secs(30),
    );
    let postgres = bound.pop().expect("two lines");
    let http = bound.pop().expect("two lines");
    (query, http, postgres)
}

/// A ledger test's services on fresh topics: a processor whose control API
/// takes `admin`'s events (see [`start_ledger_processor`]) and a query
/// service over its history. Keep `work` alive while they run: dropping it
/// removes their folder.
#[derive(Debug)]
pub struct LedgerStack {
    pub bootstrap: String,
    pub prefix: String,
    pub work: WorkDir,
    pub processor: Service,
    /// The control API's URL.
    pub api: String,
    pub query: Service,
    /// The query service's HTTP URL and PostgreSQL address.
    pub base_url: String,
    pub postgres: String,
}

impl LedgerStack {
    /// Starts the stack for test `name` on topics of `partitions`
    /// partitions.
    pub async fn start(name: &str, partitions: i32, admin: &str) -> LedgerStack {
        let bootstrap = require_broker();
        let prefix = unique_prefix(name);
        create_topics(&bootstrap, &prefix, partitions).await;
        let work = WorkDir::new(name);
        let (processor, api) =
            start_ledger_processor(&bootstrap, &prefix, work.path(), admin, "processor.log");
        let (query, base_url, postgres) = start_query(
            work.path().join("history"),
            &[],
            &work.path().join("query.log"),
        );
        LedgerStack {
            bootstrap,
            prefix,
            work,
            processor,
            api,
            query,
            base_url,
            postgres,
        }
    }
}

/// Runs a binary to completion and returns its stdout; panics with its
/// stderr if it fails.
pub fn run_to_end(name: &str, args: &[&str]) -> String {
    let output = Command::new(binary(name))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("could not run {name}: {e}"));
    assert!(
        output.status.success(),
        "{name} failed ({}):\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}
