"""deploy/k8s and the Helm chart: parse, validate, cross-check, and compare
the chart's rendering with the plain manifests."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import yaml

from consistency import check_match_conditions, consistency
from objects import CrdSchemas, ident, load_docs, structural, validate_objects
from report import R
from security import check_security


def check_k8s(root: Path, versions: list[str], crds: CrdSchemas, kubectl: str | None) -> list[dict]:
    section = "k8s manifests"
    k8s = root / "deploy" / "k8s"
    files = sorted(p for p in k8s.glob("*.yaml") if p.name != "kustomization.yaml")
    objs: list[dict] = []
    for f in files:
        docs = load_docs(f.read_text(), f"deploy/k8s/{f.name}", section)
        if docs is None:
            continue
        if not docs:
            R.fail(section, f"deploy/k8s/{f.name} holds no object")
        objs += docs
    R.check(bool(objs), section, f"{len(files)} files parse as YAML ({len(objs)} objects)")
    structural(objs, section)
    validate_objects(objs, section, versions, crds, "deploy/k8s")

    kinds = Counter(o["kind"] for o in objs)
    for kind in (
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Secret",
        "DaemonSet",
        "StatefulSet",
        "Deployment",
        "Service",
        "PersistentVolumeClaim",
        "ValidatingWebhookConfiguration",
        "Issuer",
        "Certificate",
        "PodDisruptionBudget",
        "Kafka",
        "KafkaNodePool",
        "KafkaTopic",
        "KafkaUser",
        "NetworkPolicy",
    ):
        if not kinds[kind]:
            R.fail(section, f"no {kind} in deploy/k8s")
    consistency(objs, "k8s consistency", "deploy/k8s")
    check_match_conditions(objs, "k8s consistency", "deploy/k8s")
    check_security(objs, "k8s security", "deploy/k8s")

    # Secret placeholders must be unmistakable.
    for s in [o for o in objs if o["kind"] == "Secret"]:
        values = list((s.get("stringData") or {}).values())
        R.check(
            bool(values) and all("REPLACE-ME" in v for v in values),
            section,
            f"{ident(s)}: every value is a REPLACE-ME placeholder",
        )

    # kustomization.yaml lists exactly the files.
    section = "kustomize"
    kz = yaml.safe_load((k8s / "kustomization.yaml").read_text())
    listed = kz.get("resources") or []
    missing = [r for r in listed if not (k8s / r).is_file()]
    unlisted = [f.name for f in files if f.name not in listed]
    R.check(not missing, section, "every resource in kustomization.yaml exists", ", ".join(missing))
    R.check(not unlisted, section, "every manifest is listed in kustomization.yaml", ", ".join(unlisted))
    if kubectl:
        p = subprocess.run([kubectl, "kustomize", str(k8s)], capture_output=True, text=True)
        if p.returncode != 0:
            R.fail(section, f"kubectl kustomize failed: {p.stderr.strip()[:400]}")
        else:
            n = len([d for d in yaml.safe_load_all(p.stdout) if d])
            R.check(n == len(objs), section, f"kubectl kustomize renders {n} objects", f"want {len(objs)}")
    else:
        R.skip(section, "kubectl not found: `kubectl kustomize` not run (the file list was checked)")
    return objs


def helm_render(
    helm: str, chart: Path, values: list[Path], sets: list[str], release="gpuledger", namespace="gpuledger"
):
    cmd = [helm, "template", release, str(chart), "--namespace", namespace]
    for v in values:
        cmd += ["-f", str(v)]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.run(cmd, capture_output=True, text=True)


LABEL_NOISE = {
    "app.kubernetes.io/instance",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
    "app.kubernetes.io/part-of",
    "helm.sh/chart",
}


def normalise(x, key: str | None = None):
    """An object with what Helm adds on purpose taken out: its bookkeeping
    labels, checksum annotations and comments' whitespace in CEL."""
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            if k in LABEL_NOISE or k == "__origin__" or k.startswith(("checksum/", "helm.sh/")):
                continue
            if k in ("labels", "annotations") and not v:
                continue
            out[k] = normalise(v, k)
        if key in ("labels", "annotations", "matchLabels", "selector") and not out:
            return None
        return {k: v for k, v in out.items() if v is not None}
    if isinstance(x, list):
        return [normalise(v, key) for v in x]
    if key == "expression" and isinstance(x, str):
        return re.sub(r"\s+", "", x)
    if key == "tenant-map.json" and isinstance(x, str):
        try:
            return json.loads(x)
        except json.JSONDecodeError:
            return x
    return x


def diff(a, b, path="") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b), key=str):
            if k not in a:
                out.append(f"{path}.{k}: only in the chart")
            elif k not in b:
                out.append(f"{path}.{k}: only in deploy/k8s")
            else:
                out += diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items in deploy/k8s, {len(b)} in the chart"]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += diff(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [f"{path}: {a!r} in deploy/k8s, {b!r} in the chart"]


# Objects whose chart names differ from the plain manifests' on purpose.
PARITY_NAMES = {
    ("DaemonSet", "gpuledger-collector"): "gpuledger-collector-h200",
    ("ValidatingWebhookConfiguration", "gpuledger"): "gpuledger-gpuledger",
    ("ClusterRole", "gpuledger-processor"): "gpuledger-gpuledger-processor",
    ("ClusterRoleBinding", "gpuledger-processor"): "gpuledger-gpuledger-processor",
}


def check_helm(root: Path, helm: str | None, versions: list[str], crds: CrdSchemas, static: list[dict]) -> None:
    section = "helm"
    chart = root / "deploy" / "helm" / "gpuledger"
    values_dir = root / "tests" / "deploy"
    if not helm:
        R.skip(
            section, "no helm binary (validate.sh could neither download nor build it): chart not linted or rendered"
        )
        return
    version = subprocess.run([helm, "version", "--short"], capture_output=True, text=True).stdout.strip()
    R.note(section, f"using {helm} ({version})")

    scenarios = [
        ("defaults", [], []),
        ("like deploy/k8s", [values_dir / "values-like-k8s.yaml"], []),
        ("everything on", [values_dir / "values-full.yaml"], []),
        ("no cert-manager, no webhook extras", [values_dir / "values-manual-tls.yaml"], []),
        ("webhook and query off", [], ["webhook.enabled=false", "query.enabled=false", "prometheusAnnotations=false"]),
        (
            "plaintext Strimzi, no NetworkPolicies",
            [],
            [
                "kafka.security.protocol=plaintext",
                "kafka.bootstrap=",
                "strimzi.enabled=true",
                "networkPolicies.enabled=false",
            ],
        ),
    ]
    rendered: dict[str, list[dict]] = {}
    for name, values, sets in scenarios:
        cmd = [helm, "lint", "--strict", str(chart)]
        for v in values:
            cmd += ["-f", str(v)]
        for s in sets:
            cmd += ["--set", s]
        p = subprocess.run(cmd, capture_output=True, text=True)
        R.check(p.returncode == 0, section, f"helm lint --strict ({name})", (p.stdout + p.stderr).strip()[-600:])
        p = helm_render(helm, chart, values, sets)
        if p.returncode != 0:
            R.fail(section, f"helm template ({name}) failed: {p.stderr.strip()[-600:]}")
            continue
        objs = load_docs(p.stdout, f"helm template ({name})", section)
        if objs is None:
            continue
        rendered[name] = objs
        R.ok(section, f"helm template ({name}) renders {len(objs)} objects")
        structural(objs, section)
        validate_objects(objs, section, versions, crds, f"chart ({name})")
        # Secrets the operator makes outside the chart in these scenarios.
        external = set() if any(o["kind"] == "Secret" for o in objs) else {"gpuledger-tokens"}
        external |= {"kafka-options", "gpuledger-webhook-tls-manual", "gpuledger-cluster-ca-cert", "kafka-ca-manual"}
        if not any(o["kind"] == "KafkaUser" for o in objs):
            # SCRAM passwords of a Kafka the chart does not manage.
            external |= {"gpuledger-collector", "gpuledger-processor"}
        consistency(objs, "helm consistency", f"chart ({name})", external)
        check_match_conditions(objs, "helm consistency", f"chart ({name})")
        check_security(objs, "helm security", f"chart ({name})")

    # What must not render.
    refusals = [
        (
            "a webhook token that is not a scheduler token",
            [values_dir / "values-full.yaml"],
            ["tokens.webhookToken=not-a-scheduler-token"],
            "scheduler",
        ),
        (
            "no cert-manager and no caBundle",
            [],
            ["webhook.certManager.enabled=false", "webhook.tlsSecretName=x"],
            "caBundle",
        ),
        ("no Kafka bootstrap at all", [], ["kafka.bootstrap="], "kafka.bootstrap"),
        ("tokens.create without tokens", [], ["tokens.create=true"], "required"),
        ("a collector pool without a nodeSelector", [], ["collector.pools[0].name=a100"], "nodeSelector"),
        ("a Kafka security protocol the binaries do not know", [], ["kafka.security.protocol=sasl-ssl"], "sasl_ssl"),
        (
            "KafkaUsers without SCRAM logins",
            [],
            ["kafka.users.enabled=true", "kafka.security.protocol=ssl"],
            "kafka.users.enabled",
        ),
        ("NetworkPolicies without Prometheus' peers", [], ["networkPolicies.metricsFrom=null"], "metricsFrom"),
    ]
    for name, values, sets, needle in refusals:
        p = helm_render(helm, chart, values, sets)
        R.check(
            p.returncode != 0 and needle in p.stderr,
            section,
            f"helm template refuses {name}",
            f"exit {p.returncode}: {p.stderr.strip()[-300:]}",
        )

    # The chart renders what deploy/k8s holds.
    like = rendered.get("like deploy/k8s")
    if like is not None:
        index = {(o["kind"], o["metadata"]["name"]): o for o in like}
        problems = []
        for o in static:
            key = (o["kind"], o["metadata"]["name"])
            other = index.get((o["kind"], PARITY_NAMES.get(key, key[1])))
            if o["kind"] == "Namespace":
                continue  # helm install --create-namespace makes it
            if other is None:
                problems.append(f"{ident(o)} has no counterpart in the chart")
                continue
            a = normalise({k: v for k, v in o.items() if k not in ("metadata",)})
            b = normalise({k: v for k, v in other.items() if k not in ("metadata",)})
            a["metadata"] = normalise({k: v for k, v in o["metadata"].items() if k not in ("name",)})
            b["metadata"] = normalise({k: v for k, v in other["metadata"].items() if k not in ("name",)})
            if o["kind"] == "ClusterRoleBinding":
                # It names the ClusterRole, whose chart name differs on purpose.
                if b["roleRef"]["name"] == PARITY_NAMES.get(("ClusterRole", a["roleRef"]["name"])):
                    b["roleRef"]["name"] = a["roleRef"]["name"]
            problems += [f"{ident(o)}{d}" for d in diff(a, b)]
        R.check(
            not problems,
            "helm parity",
            f"the chart with values-like-k8s.yaml renders the {len(static) - 1} objects of deploy/k8s",
            "; ".join(problems[:12]) + (f" (+{len(problems) - 12} more)" if len(problems) > 12 else ""),
        )

    # Copies the chart keeps of files outside it.
    ours = (root / "deploy" / "prometheus" / "alerts.yaml").read_bytes()
    theirs = (chart / "files" / "alerts.yaml").read_bytes()
    R.check(ours == theirs, "helm parity", "files/alerts.yaml is identical to deploy/prometheus/alerts.yaml")
    full = rendered.get("everything on") or []
    rule = next((o for o in full if o["kind"] == "PrometheusRule"), None)
    if rule is not None:
        R.check(
            rule["spec"]["groups"] == yaml.safe_load(ours)["groups"],
            "helm parity",
            "the PrometheusRule carries the groups of alerts.yaml",
        )
