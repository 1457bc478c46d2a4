//! The demo, run as `make demo` runs it (`deploy/local/demo.sh`: the
//! company's events through the control API, the simulated collectors'
//! month at accelerated time into the real broker, the processor's four
//! ledger partitions, the Parquet history, the query service), against the
//! same month recomputed offline by `gpuledger-processor statement` (one
//! partition, no Kafka, no history). The statement the demo prints, and
//! the one the query service serves, must equal the offline one to the
//! cent, every line and breakdown; only `idle_allocated` needs the samples,
//! which the offline recomputation does not read.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use gpuledger_tests::{
    WorkDir, binary, create_topics, demo_month, offline_statement, require_broker, sql,
    unique_prefix,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_the_demo_month_prices_the_same_live_and_offline() {
    let bootstrap = require_broker();
    let prefix = unique_prefix("demostmt");
    create_topics(&bootstrap, &prefix, 4).await;
    let work = WorkDir::new("demo-statement");
    let repo = gpuledger_tests::repo_root();
    let repo = repo.display();
    let cluster = "demo-test";

    // Offline: the whole month as one ledger file.
    let month_path = work.path().join("month.ndjson");
    std::fs::write(&month_path, demo_month("month", cluster)).unwrap();
    let offline = offline_statement(&month_path, "2026-11");
    // The month exercises the rules that matter.
    let tenant = |name: &str| {
        offline["tenants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["tenant"] == name)
            .unwrap()
            .clone()
    };
    for line in [
        "compute_reserved",
        "compute_quota",
        "compute_burst",
        "reservation_unused",
        "health_credit",
        "shared_idle",
        "storage",
        "data_movement",
        "overhead",
    ] {
        let llm = tenant("team-llm");
        assert_ne!(llm["lines"][line], "0.00", "{line} is zero: {llm}");
    }
    for name in ["team-research", "team-vision", "team-search"] {
        let t = tenant(name);
        assert_ne!(t["lines"]["compute_quota"], "0.00", "{t}");
        assert_ne!(t["breakdown"]["retried_work"], "0.00", "{t}");
    }

    // Live: `deploy/local/demo.sh` itself, on topics of its own, kept up
    // (no DEMO_EXIT) so the services can be asked afterwards.
    let demo = Demo::start(&prefix, &work);
    let printed = &demo.statement;
    for t in offline["tenants"].as_array().unwrap() {
        let name = t["tenant"].as_str().unwrap();
        for (line, amount) in t["lines"].as_object().unwrap() {
            assert_eq!(
                printed[&(name.to_owned(), line.clone())],
                *amount,
                "{name} {line}"
            );
        }
        for key in ["failed_work", "retried_work", "cost_per_completed_job"] {
            let key = key.to_owned();
            assert_eq!(
                printed[&(name.to_owned(), key.clone())],
                t["breakdown"][&key],
                "{name}"
            );
        }
        let jobs = printed[&(name.to_owned(), "completed_jobs".to_owned())].as_str();
        assert_eq!(
            jobs.map(str::parse::<u64>),
            Some(Ok(t["breakdown"]["completed_jobs"].as_u64().unwrap()))
        );
    }
    assert_eq!(
        printed.len(),
        offline["tenants"].as_array().unwrap().len() * (11 + 4),
        "{printed:?}"
    );
    let base_url = demo.query_url.clone();
    let mut live: serde_json::Value =
        ureq::get(&format!("{base_url}/v1/statements?period=2026-11"))
            .call()
            .unwrap()
            .into_json()
            .unwrap();
    for t in live["tenants"].as_array_mut().unwrap() {
        let idle = t["breakdown"]
            .as_object_mut()
            .unwrap()
            .remove("idle_allocated");
        let idle = idle.and_then(|v| v.as_str().map(str::to_owned));
        assert!(
            idle.as_deref().is_some_and(|v| v != "0.00"),
            "{}: the samples show no idle time held",
            t["tenant"]
        );
    }
    assert_eq!(live, offline);

    // Per job attempt, the same money: job_costs adds up to the compute and
    // credit lines, and tenant_usage_hourly to the GPU-hours of job_costs.
    let sums = sql(
        &base_url,
        "SELECT j.tenant, CAST(sum(j.compute) AS VARCHAR) AS compute, \
                CAST(sum(j.health_credit) AS VARCHAR) AS credit, \
                CAST(round(sum(j.gpu_hours), 2) AS VARCHAR) AS hours, \
                (SELECT CAST(round(sum(u.gpu_hours), 2) AS VARCHAR) FROM tenant_usage_hourly u \
                  WHERE u.period = '2026-11' AND u.tenant = j.tenant) AS hourly \
         FROM job_costs j WHERE j.period = '2026-11' GROUP BY j.tenant ORDER BY j.tenant",
    )
    .unwrap();
    assert_eq!(sums.len(), live["tenants"].as_array().unwrap().len());
    for (row, tenant) in sums.iter().zip(live["tenants"].as_array().unwrap()) {
        assert_eq!(row["tenant"], tenant["tenant"]);
        let lines = &tenant["lines"];
        // Amounts have exactly two digits: add them as cents.
        let cents = |text: &str| text.replace('.', "").parse::<i64>().unwrap();
        let compute: i64 = ["compute_reserved", "compute_quota", "compute_burst"]
            .iter()
            .map(|l| cents(lines[l].as_str().unwrap()))
            .sum();
        assert_eq!(cents(row["compute"].as_str().unwrap()), compute, "{row}");
        assert_eq!(row["credit"], lines["health_credit"], "{row}");
        assert_eq!(row["hours"], row["hourly"], "{row}");
    }

    // The FOCUS export of that month: every kind of charge, each tenant's
    // rows adding up to its total.
    let focus = gpuledger_tests::focus_export(&base_url, "2026-11", work.path());
    for tenant in live["tenants"].as_array().unwrap() {
        let name = tenant["tenant"].as_str().unwrap();
        assert_eq!(
            focus["billed_by_subaccount"][name], tenant["lines"]["total"],
            "{name}: {focus}"
        );
    }
    assert_eq!(
        focus["categories"],
        serde_json::json!(["Adjustment", "Credit", "Usage"])
    );
    for line in [
        "compute_reserved",
        "compute_quota",
        "compute_burst",
        "reservation_unused",
        "storage",
        "data_movement",
        "health_credit",
        "shared_idle",
        "overhead",
    ] {
        assert!(
            focus["lines"].as_array().unwrap().iter().any(|l| l == line),
            "{line}: {focus}"
        );
    }

    // The dashboards: every panel's SQL, with Grafana's macros expanded as
    // Grafana expands them, runs over the PostgreSQL protocol on the month
    // and must give rows of the shape its panel draws.
    let (host, port) = (demo.pg_host.as_str(), demo.pg_port.as_str());
    let checked = Command::new(gpuledger_tests::python())
        .arg(format!("{repo}/tests/dashboards/check_panels.py"))
        .args([host, port])
        .output()
        .unwrap();
    assert!(
        checked.status.success(),
        "dashboard panels:\n{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    drop(demo);
}

/// `deploy/local/demo.sh` running, once it printed the month: its
/// statement table, by (tenant, line), and where its services listen.
struct Demo {
    child: std::process::Child,
    statement: BTreeMap<(String, String), serde_json::Value>,
    query_url: String,
    pg_host: String,
    pg_port: String,
}

impl Demo {
    fn start(prefix: &str, work: &WorkDir) -> Demo {
        let repo = gpuledger_tests::repo_root();
        let repo = repo.display();
        // The binaries the tests run: <target>/debug/…
        let target = binary("gpuledger-processor")
            .parent()
            .and_then(|p| p.parent())
            .unwrap()
            .to_owned();
        let mut child = Command::new(format!("{repo}/deploy/local/demo.sh"))
            .env("CARGO_TARGET_DIR", target)
            .env("GPULEDGER_TOPIC_PREFIX", prefix)
            .env_remove("DEMO_EXIT")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(work.path().join("demo.err")).unwrap())
            .spawn()
            .expect("demo.sh starts");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let mut lines = Vec::new();
        for line in stdout.lines().map_while(Result::ok) {
            let done = line.contains("Services stay up");
            lines.push(line);
            if done {
                break;
            }
        }
        let text = lines.join("\n");
        std::fs::write(work.path().join("demo.out"), &text).unwrap();
        assert!(
            lines.last().is_some_and(|l| l.contains("Services stay up")),
            "the demo stopped early:\n{text}"
        );
        // The table: a header of tenants after "(USD)", then a line name and
        // one amount per tenant on each row, up to the platform's line.
        let header = lines
            .iter()
            .position(|l| l.trim_start().starts_with("(USD)"))
            .expect("a statement table");
        let tenants: Vec<String> = lines[header]
            .split_whitespace()
            .skip(1)
            .map(str::to_owned)
            .collect();
        let mut statement = BTreeMap::new();
        for row in &lines[header + 1..] {
            let cells: Vec<&str> = row.split_whitespace().collect();
            if cells.first().is_some_and(|c| c.starts_with("platform:")) {
                break;
            }
            if cells.len() != tenants.len() + 1 || cells[0].starts_with('-') {
                continue;
            }
            for (tenant, amount) in tenants.iter().zip(&cells[1..]) {
                statement.insert(
                    (tenant.clone(), cells[0].to_owned()),
                    serde_json::json!(amount),
                );
            }
        }
        let after = |marker: &str| {
            lines
                .iter()
                .find_map(|l| l.split_once(marker).map(|(_, rest)| rest.trim().to_owned()))
                .unwrap_or_else(|| panic!("the demo printed no {marker:?}:\n{text}"))
        };
        let sql_line = after("SQL API:");
        let query_url = sql_line
            .rsplit(' ')
            .next()
            .and_then(|u| u.strip_suffix("/v1/sql"))
            .expect("the SQL API's address")
            .to_owned();
        let psql: Vec<String> = after("PostgreSQL:")
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let flag = |f: &str| psql[psql.iter().position(|a| a == f).unwrap() + 1].clone();
        Demo {
            child,
            statement,
            query_url,
            pg_host: flag("-h"),
            pg_port: flag("-p"),
        }
    }
}

impl Drop for Demo {
    /// Stops the demo as Ctrl-C would: its trap stops the services.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}
