"""Loading manifests, their structure, schema validation (Kubernetes and
CRDs), and helpers to read pod specs."""

from __future__ import annotations

import copy
from collections import Counter
from pathlib import Path

import yaml

from report import R


CRD_GROUPS = ("cert-manager.io", "kafka.strimzi.io", "monitoring.coreos.com")
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "PersistentVolume",
    "StorageClass",
    "RuntimeClass",
    "PriorityClass",
    "CustomResourceDefinition",
}


def load_docs(text: str, origin: str, section: str) -> list[dict] | None:
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        R.fail(section, f"{origin} is not valid YAML: {e}")
        return None
    for d in docs:
        if not isinstance(d, dict):
            R.fail(section, f"{origin}: a document is not a mapping")
            return None
        d.setdefault("__origin__", origin)
    return docs


def ident(obj: dict) -> str:
    md = obj.get("metadata") or {}
    ns = md.get("namespace")
    return f"{obj.get('kind')}/{(ns + '/') if ns else ''}{md.get('name')}"


def strip_origin(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k != "__origin__"}


def structural(objs: list[dict], section: str) -> bool:
    """apiVersion, kind, metadata.name (and namespace where namespaced) on every object."""
    good = True
    for o in objs:
        where = o.get("__origin__", "?")
        md = o.get("metadata")
        problems = []
        if not isinstance(o.get("apiVersion"), str) or not o.get("apiVersion"):
            problems.append("no apiVersion")
        if not isinstance(o.get("kind"), str) or not o.get("kind"):
            problems.append("no kind")
        if not isinstance(md, dict) or not md.get("name"):
            problems.append("no metadata.name")
        elif o.get("kind") not in CLUSTER_SCOPED and not md.get("namespace"):
            problems.append("namespaced kind without metadata.namespace")
        if problems:
            good = False
            R.fail(section, f"{where}: {ident(o)}: {', '.join(problems)}")
    seen = Counter(ident(o) for o in objs)
    for key, n in seen.items():
        if n > 1:
            good = False
            R.fail(section, f"{key} is defined {n} times")
    return good


class CrdSchemas:
    """openAPIV3Schema of each (group/version, kind) from CRD files, made strict:
    an object schema with properties rejects fields it does not list, as the
    API server does with field validation Strict."""

    def __init__(self, dirs: list[Path]) -> None:
        self.schemas: dict[tuple[str, str], dict] = {}
        self.sources: list[str] = []
        for d in dirs:
            if not d.is_dir():
                continue
            for f in sorted(d.glob("*.yaml")):
                try:
                    docs = list(yaml.safe_load_all(f.read_text()))
                except yaml.YAMLError:
                    continue
                found = 0
                for doc in docs:
                    if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                        continue
                    spec = doc.get("spec") or {}
                    group = spec.get("group")
                    kind = (spec.get("names") or {}).get("kind")
                    for v in spec.get("versions") or []:
                        schema = (v.get("schema") or {}).get("openAPIV3Schema")
                        if group and kind and schema:
                            self.schemas[(f"{group}/{v['name']}", kind)] = self._strict(copy.deepcopy(schema))
                            found += 1
                if found:
                    self.sources.append(f.name)

    def _strict(self, s):
        if isinstance(s, dict):
            if (
                s.get("type") == "object"
                and "properties" in s
                and "additionalProperties" not in s
                and not s.get("x-kubernetes-preserve-unknown-fields")
            ):
                s["additionalProperties"] = False
            for k, v in list(s.items()):
                if k in ("properties", "patternProperties", "definitions"):
                    for name in v:
                        v[name] = self._strict(v[name])
                elif k in ("items", "additionalProperties", "not") and isinstance(v, dict):
                    s[k] = self._strict(v)
                elif k in ("allOf", "anyOf", "oneOf") and isinstance(v, list):
                    s[k] = [self._strict(x) for x in v]
        return s

    def get(self, api_version: str, kind: str):
        return self.schemas.get((api_version, kind))


def crd_structure(o: dict) -> list[str]:
    """What gpuledger's custom resources need even without their CRD schema."""
    kind, spec, md = o.get("kind"), o.get("spec") or {}, o.get("metadata") or {}
    labels = md.get("labels") or {}
    p = []
    if kind == "Certificate":
        if not spec.get("secretName"):
            p.append("spec.secretName")
        if not (spec.get("issuerRef") or {}).get("name"):
            p.append("spec.issuerRef.name")
        if not spec.get("isCA") and not spec.get("dnsNames"):
            p.append("spec.dnsNames")
    elif kind == "Issuer":
        if not any(k in spec for k in ("selfSigned", "ca", "acme", "vault", "venafi")):
            p.append("spec.<issuer type>")
    elif kind == "KafkaNodePool":
        if not labels.get("strimzi.io/cluster"):
            p.append("label strimzi.io/cluster")
        for k in ("replicas", "roles", "storage"):
            if k not in spec:
                p.append(f"spec.{k}")
    elif kind == "Kafka":
        if not (spec.get("kafka") or {}).get("listeners"):
            p.append("spec.kafka.listeners")
    elif kind == "KafkaTopic":
        if not labels.get("strimzi.io/cluster"):
            p.append("label strimzi.io/cluster")
        if not spec.get("partitions") or not spec.get("replicas"):
            p.append("spec.partitions/replicas")
    elif kind == "PrometheusRule":
        if not isinstance(spec.get("groups"), list) or not spec.get("groups"):
            p.append("spec.groups")
    return p


NO_SCHEMA: set[str] = set()


def validate_objects(objs: list[dict], section: str, versions: list[str], crds: CrdSchemas, label: str) -> None:
    from kubernetes_validate import utils as kv
    import jsonschema

    bad = 0
    checked = Counter()
    for o in objs:
        body = strip_origin(o)
        api, kind = o.get("apiVersion", ""), o.get("kind", "")
        group = api.split("/")[0] if "/" in api else ""
        where = f"{o.get('__origin__')}: {ident(o)}"
        if group in CRD_GROUPS:
            missing = crd_structure(o)
            if missing:
                bad += 1
                R.fail(section, f"{where}: missing {', '.join(missing)}")
            schema = crds.get(api, kind)
            if schema is None:
                checked["structure only"] += 1
                NO_SCHEMA.add(f"{kind} ({api})")
                continue
            errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(body), key=lambda e: list(e.path))
            if errors:
                bad += 1
                for e in errors[:5]:
                    path = ".".join(str(x) for x in e.path) or "(root)"
                    R.fail(section, f"{where}: {path}: {e.message}")
            else:
                checked["CRD schema"] += 1
            continue
        for version in versions:
            try:
                kv.validate(body, version, strict=True)
                checked[f"k8s {kv.major_minor(version)}"] += 1
            except kv.SchemaNotFoundError:
                bad += 1
                R.fail(
                    section,
                    f"{where}: no Kubernetes {version} schema for {api} {kind} (a typo, or a CRD kind the validator does not know)",
                )
                break
            except kv.ValidationError as e:
                bad += 1
                R.fail(section, f"{where}: invalid for Kubernetes {version}: {e}")
    detail = ", ".join(f"{n} against {what}" for what, n in sorted(checked.items()))
    if not bad:
        R.ok(section, f"{label}: {len(objs)} objects valid ({detail})")


def pod_spec(o: dict) -> dict | None:
    kind = o.get("kind")
    spec = o.get("spec") or {}
    if kind in ("Deployment", "StatefulSet", "DaemonSet"):
        return (spec.get("template") or {}).get("spec")
    if kind == "CronJob":
        return (((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("spec")
    return None


def pod_labels(o: dict) -> dict:
    spec = o.get("spec") or {}
    if o.get("kind") == "CronJob":
        return ((((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
            "labels"
        ) or {}
    return ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}


def containers(ps: dict) -> list[dict]:
    return list(ps.get("initContainers") or []) + list(ps.get("containers") or [])


def args_of(c: dict) -> list[str]:
    return [str(a) for a in (c.get("args") or [])]


def arg_value(c: dict, flag: str) -> str | None:
    for a in args_of(c):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    a = args_of(c)
    for i, x in enumerate(a[:-1]):
        if x == flag:
            return a[i + 1]
    return None


def component(o: dict) -> str | None:
    return (
        pod_labels(o).get("app.kubernetes.io/component")
        if pod_spec(o) is not None
        else (((o.get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component"))
    )
