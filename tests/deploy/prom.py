"""deploy/prometheus: alert rules and the scrape configuration."""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from pathlib import Path

import yaml

from report import R


DURATION = re.compile(r"^((\d+)y)?((\d+)w)?((\d+)d)?((\d+)h)?((\d+)m)?((\d+)s)?((\d+)ms)?$")


def valid_duration(s) -> bool:
    return isinstance(s, str) and s != "" and DURATION.match(s) is not None


def exported_metrics(root: Path) -> set[str]:
    """Metric names the Rust sources declare (string literals gpuledger_…)."""
    names = set()
    for sub in ("collector", "processor", "query", "common"):
        for f in (root / sub).rglob("*.rs"):
            for m in re.finditer(r'"(gpuledger_[a-z0-9_]+)"', f.read_text(errors="replace")):
                names.add(m.group(1))
    return names


PLANNED_METRICS = {
    "gpuledger_admission_seconds_bucket": "histogram of admission decision latency",
}
EXTERNAL_METRICS = {"up", "kafka_consumergroup_lag"}


def selectors(node, out: list[str]) -> None:
    name = type(node).__name__
    if name == "VectorSelector":
        out.append(node.name)
        return
    for attr in ("lhs", "rhs", "expr", "args", "vector_selector", "param"):
        v = getattr(node, attr, None)
        if v is None:
            continue
        for item in v if isinstance(v, (list, tuple)) else [v]:
            if type(item).__module__.startswith("promql"):
                selectors(item, out)


def check_prometheus(root: Path, promtool: str | None) -> None:
    section = "prometheus"
    pdir = root / "deploy" / "prometheus"
    try:
        import promql_parser
    except ImportError:
        promql_parser = None
        R.skip(section, "promql-parser is not installed: expressions not parsed")

    rules_doc = yaml.safe_load((pdir / "alerts.yaml").read_text())
    R.check(
        isinstance(rules_doc, dict) and set(rules_doc) == {"groups"},
        section,
        "alerts.yaml has exactly one top-level key, groups",
    )
    exported = exported_metrics(root)
    known = exported | set(PLANNED_METRICS) | EXTERNAL_METRICS
    groups = rules_doc.get("groups") or []
    names = Counter()
    problems, planned_used = [], set()
    n_rules = 0
    group_names = Counter(g.get("name") for g in groups)
    for g, n in group_names.items():
        if not g or n > 1:
            problems.append(f"group name {g!r} missing or repeated")
    for g in groups:
        for r in g.get("rules") or []:
            n_rules += 1
            alert = r.get("alert")
            where = f"{g.get('name')}/{alert}"
            names[alert] += 1
            if not alert or "record" in r:
                problems.append(f"{where}: not an alerting rule")
            extra = set(r) - {"alert", "expr", "for", "keep_firing_for", "labels", "annotations"}
            if extra:
                problems.append(f"{where}: unknown keys {sorted(extra)}")
            if not valid_duration(r.get("for")):
                problems.append(f"{where}: `for` {r.get('for')!r} is not a duration")
            sev = (r.get("labels") or {}).get("severity")
            if sev not in ("critical", "warning", "info"):
                problems.append(f"{where}: labels.severity {sev!r}")
            ann = r.get("annotations") or {}
            if not ann.get("summary"):
                problems.append(f"{where}: no annotations.summary")
            for k, v in ann.items():
                if str(v).count("{{") != str(v).count("}}"):
                    problems.append(f"{where}: annotation {k} has unbalanced {{{{ }}}}")
            expr = r.get("expr")
            if not isinstance(expr, str) or not expr.strip():
                problems.append(f"{where}: no expr")
                continue
            if promql_parser is not None:
                try:
                    tree = promql_parser.parse(expr)
                except Exception as e:  # noqa: BLE001
                    problems.append(f"{where}: expr does not parse: {e}")
                    continue
                used: list[str] = []
                selectors(tree, used)
                for m in used:
                    if m not in known:
                        problems.append(f"{where}: metric {m} is neither exported, planned nor external")
                    if m in PLANNED_METRICS:
                        planned_used.add(m)
    for alert, n in names.items():
        if n > 1:
            problems.append(f"alert {alert} is defined {n} times")
    for p in problems:
        R.fail(section, f"alerts.yaml: {p}")
    if not problems:
        R.ok(
            section,
            f"alerts.yaml: {n_rules} rules in {len(groups)} groups: alert, expr, for, labels.severity, annotations.summary"
            + (", PromQL parses, metrics known" if promql_parser else ""),
        )
    for m in sorted(planned_used):
        R.note(section, f"{m} ({PLANNED_METRICS[m]}) is used by an alert but not exported yet")
    required = [
        "gpuledger_collector_spool_bytes",
        "gpuledger_collector_spool_dropped_total",
        "gpuledger_telemetry_dead_letters_total",
        "gpuledger_ledger_events_rejected_total",
        "gpuledger_collector_nvml_errors_total",
        "kafka_consumergroup_lag",
        "up",
        "gpuledger_budget_alerts_total",
        "gpuledger_admission_seconds_bucket",
    ]
    text = (pdir / "alerts.yaml").read_text()
    missing = [m for m in required if m not in text]
    R.check(
        not missing,
        section,
        "alerts.yaml covers lag, spool, DLQ, rejections, NVML, up, budgets and admission latency",
        ", ".join(missing),
    )

    conf = yaml.safe_load((pdir / "scrape.yaml").read_text())
    problems = []
    allowed = {
        "global",
        "rule_files",
        "scrape_configs",
        "alerting",
        "remote_write",
        "remote_read",
        "storage",
        "tracing",
        "scrape_config_files",
        "otlp",
        "runtime",
    }
    if not isinstance(conf, dict) or set(conf) - allowed:
        problems.append(f"unknown top-level keys {sorted(set(conf or {}) - allowed)}")
    for f in (conf or {}).get("rule_files") or []:
        if not (pdir / f).is_file():
            problems.append(f"rule file {f} does not exist next to scrape.yaml")
    for k, v in ((conf or {}).get("global") or {}).items():
        if k.endswith(("interval", "timeout")) and not valid_duration(v):
            problems.append(f"global.{k} {v!r} is not a duration")
    jobs = Counter()
    sd_keys = (
        "static_configs",
        "kubernetes_sd_configs",
        "file_sd_configs",
        "dns_sd_configs",
        "consul_sd_configs",
        "http_sd_configs",
    )
    for sc in (conf or {}).get("scrape_configs") or []:
        job = sc.get("job_name")
        jobs[job] += 1
        if not job:
            problems.append("a scrape config has no job_name")
        if not any(k in sc for k in sd_keys):
            problems.append(f"{job}: no targets (static_configs or a service discovery)")
        for sc_static in sc.get("static_configs") or []:
            for t in sc_static.get("targets") or []:
                if not re.match(r"^[^:/\s]+:\d+$|^\[[0-9a-fA-F:]+\]:\d+$", str(t)):
                    problems.append(f"{job}: target {t!r} is not host:port")
        for rc in sc.get("relabel_configs") or []:
            action = rc.get("action", "replace")
            if action not in (
                "replace",
                "keep",
                "drop",
                "keepequal",
                "dropequal",
                "hashmod",
                "labelmap",
                "labeldrop",
                "labelkeep",
                "lowercase",
                "uppercase",
            ):
                problems.append(f"{job}: relabel action {action!r}")
            if "regex" in rc:
                try:
                    re.compile(str(rc["regex"]))
                except re.error as e:
                    problems.append(f"{job}: regex {rc['regex']!r}: {e}")
            if action == "replace" and "target_label" not in rc:
                problems.append(f"{job}: a replace relabel without target_label")
    for job, n in jobs.items():
        if n > 1:
            problems.append(f"job_name {job} is repeated")
    want_jobs = {"kubernetes-pods", "gpuledger-collector", "gpuledger-processor", "gpuledger-query"}
    if not want_jobs <= set(jobs):
        problems.append(f"missing jobs {sorted(want_jobs - set(jobs))}")
    for p in problems:
        R.fail(section, f"scrape.yaml: {p}")
    if not problems:
        R.ok(
            section,
            f"scrape.yaml: {len(jobs)} scrape configs with job_name and targets, relabel regexes compile, rule file found",
        )

    # The relabelling gives pods the job names the alerts select.
    pods = next((sc for sc in conf["scrape_configs"] if sc.get("job_name") == "kubernetes-pods"), None)
    if pods:
        labels = {
            "__meta_kubernetes_pod_annotation_prometheus_io_scrape": "true",
            "__meta_kubernetes_pod_annotation_prometheus_io_port": "9400",
            "__meta_kubernetes_pod_annotation_prometheus_io_path": "/metrics",
            "__meta_kubernetes_pod_ip": "10.1.2.3",
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_label_app_kubernetes_io_part_of": "gpuledger",
            "__meta_kubernetes_pod_label_app_kubernetes_io_component": "collector",
            "__meta_kubernetes_pod_label_gpuledger_io_pool": "h200",
            "__meta_kubernetes_namespace": "gpuledger",
            "__meta_kubernetes_pod_name": "gpuledger-collector-abcde",
            "__meta_kubernetes_pod_node_name": "gpu-node-01",
            "__address__": "10.1.2.3:8443",
            "__metrics_path__": "/metrics",
            "job": "kubernetes-pods",
        }
        out = relabel(labels, pods["relabel_configs"])
        R.check(
            out is not None
            and out.get("job") == "gpuledger-collector"
            and out.get("__address__") == "10.1.2.3:9400"
            and out.get("pool") == "h200",
            section,
            "scrape.yaml: a collector pod becomes job gpuledger-collector at its annotated port, with its pool",
            str(out),
        )
        v6 = dict(labels, __meta_kubernetes_pod_ip="fd00:10::5", __address__="[fd00:10::5]:8443")
        out = relabel(v6, pods["relabel_configs"])
        R.check(
            out is not None and out.get("__address__") == "[fd00:10::5]:9400",
            section,
            "scrape.yaml: IPv6 pod addresses are bracketed",
            str(out),
        )
        skipped = relabel(
            dict(labels, __meta_kubernetes_pod_annotation_prometheus_io_scrape=""), pods["relabel_configs"]
        )
        R.check(skipped is None, section, "scrape.yaml: pods without the scrape annotation are dropped")

    if promtool:
        for args, what in (
            (["check", "rules", str(pdir / "alerts.yaml")], "rules"),
            (["check", "config", "--syntax-only", str(pdir / "scrape.yaml")], "config"),
        ):
            p = subprocess.run([promtool, *args], capture_output=True, text=True)
            R.check(p.returncode == 0, section, f"promtool check {what}", (p.stdout + p.stderr).strip()[-500:])
    else:
        R.skip(
            section,
            "promtool not found (GPULEDGER_BUILD_PROMTOOL=1 builds one): `promtool check` not run, the checks above stand in",
        )


def relabel(labels: dict, configs: list[dict]) -> dict | None:
    """Prometheus relabelling for replace/keep/drop (what scrape.yaml uses)."""
    labels = dict(labels)
    for rc in configs:
        src = rc.get("source_labels") or []
        value = rc.get("separator", ";").join(labels.get(s, "") for s in src)
        regex = re.compile(f"^(?:{rc.get('regex', '(.*)')})$")
        action = rc.get("action", "replace")
        m = regex.match(value)
        if action == "keep" and not m:
            return None
        if action == "drop" and m:
            return None
        if action == "replace" and m:
            repl = rc.get("replacement", "$1")
            result = re.sub(r"\$(\d+)|\$\{(\d+)\}", lambda g, m=m: m.group(int(g.group(1) or g.group(2))) or "", repl)
            target = rc["target_label"]
            if result:
                labels[target] = result
            else:
                labels.pop(target, None)
    return labels
