"""References between objects and the settings they must agree on, and
the webhook's CEL matchConditions evaluated on sample pods."""

from __future__ import annotations

import json
from collections import defaultdict

from objects import arg_value, component, containers, ident, pod_labels, pod_spec
from report import R
from security import kafka_issued_secrets


def consistency(objs: list[dict], section: str, label: str, external_secrets: set[str] = frozenset()) -> None:
    """References between the objects: everything a workload, Service,
    webhook, binding or Strimzi resource names must be there, and the
    settings the services rely on must agree with each other."""
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for o in objs:
        by_kind[o["kind"]].append(o)

    def names(kind: str, ns: str | None = None) -> set[str]:
        return {
            o["metadata"]["name"] for o in by_kind.get(kind, []) if ns is None or o["metadata"].get("namespace") == ns
        }

    problems: list[str] = []
    checks = 0

    # Secrets that exist: declared ones, those cert-manager and Strimzi's
    # user operator will write (and the cluster CA copy beside them), and
    # those the operator provides outside the rendered set.
    def secrets(ns: str) -> set[str]:
        s = names("Secret", ns) | set(external_secrets) | kafka_issued_secrets(objs, ns)
        for c in by_kind.get("Certificate", []):
            if c["metadata"].get("namespace") == ns:
                s.add((c.get("spec") or {}).get("secretName"))
        return s

    workloads = [o for o in objs if pod_spec(o) is not None]
    for w in workloads:
        ns = w["metadata"].get("namespace")
        ps = pod_spec(w)
        where = ident(w)
        sa = ps.get("serviceAccountName")
        checks += 1
        if sa and sa not in names("ServiceAccount", ns):
            problems.append(f"{where}: ServiceAccount {sa} is not defined")
        vols = {v["name"]: v for v in ps.get("volumes") or []}
        for v in vols.values():
            checks += 1
            if "configMap" in v and v["configMap"]["name"] not in names("ConfigMap", ns):
                problems.append(f"{where}: volume {v['name']}: ConfigMap {v['configMap']['name']} is not defined")
            if "configMap" in v:
                cm = next(
                    (
                        o
                        for o in by_kind["ConfigMap"]
                        if o["metadata"]["name"] == v["configMap"]["name"] and o["metadata"].get("namespace") == ns
                    ),
                    None,
                )
                for item in v["configMap"].get("items") or []:
                    if cm is not None and item["key"] not in (cm.get("data") or {}):
                        problems.append(
                            f"{where}: volume {v['name']}: key {item['key']} is not in ConfigMap {cm['metadata']['name']}"
                        )
            if "secret" in v and v["secret"]["secretName"] not in secrets(ns):
                problems.append(
                    f"{where}: volume {v['name']}: Secret {v['secret']['secretName']} is neither defined nor issued by a Certificate"
                )
            if "persistentVolumeClaim" in v and v["persistentVolumeClaim"]["claimName"] not in names(
                "PersistentVolumeClaim", ns
            ):
                problems.append(
                    f"{where}: volume {v['name']}: PVC {v['persistentVolumeClaim']['claimName']} is not defined"
                )
        claim_templates = {t["metadata"]["name"] for t in (w.get("spec") or {}).get("volumeClaimTemplates") or []}
        for c in containers(ps):
            for m in c.get("volumeMounts") or []:
                checks += 1
                if m["name"] not in vols and m["name"] not in claim_templates:
                    problems.append(f"{where}: container {c['name']} mounts unknown volume {m['name']}")
            for ef in c.get("envFrom") or []:
                checks += 1
                if "configMapRef" in ef and ef["configMapRef"]["name"] not in names("ConfigMap", ns):
                    problems.append(f"{where}: envFrom ConfigMap {ef['configMapRef']['name']} is not defined")
            for e in c.get("env") or []:
                ref = e.get("valueFrom") or {}
                checks += 1
                if "secretKeyRef" in ref:
                    sk = ref["secretKeyRef"]
                    if sk["name"] not in secrets(ns):
                        problems.append(f"{where}: env {e['name']}: Secret {sk['name']} is not defined")
                    else:
                        sec = next(
                            (
                                o
                                for o in by_kind.get("Secret", [])
                                if o["metadata"]["name"] == sk["name"] and o["metadata"].get("namespace") == ns
                            ),
                            None,
                        )
                        if sec is not None:
                            keys = set((sec.get("stringData") or {})) | set((sec.get("data") or {}))
                            if sk["key"] not in keys:
                                problems.append(
                                    f"{where}: env {e['name']}: key {sk['key']} is not in Secret {sk['name']}"
                                )
                if "configMapKeyRef" in ref:
                    ck = ref["configMapKeyRef"]
                    if ck["name"] not in names("ConfigMap", ns) and not ck.get("optional"):
                        problems.append(f"{where}: env {e['name']}: ConfigMap {ck['name']} is not defined")
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
                if isinstance(port, str):
                    checks += 1
                    if port not in {p.get("name") for p in c.get("ports") or []}:
                        problems.append(f"{where}: {c['name']} {probe} uses unknown port name {port}")
        sel = ((w.get("spec") or {}).get("selector") or {}).get("matchLabels")
        if sel is not None:
            checks += 1
            if any(pod_labels(w).get(k) != v for k, v in sel.items()):
                problems.append(f"{where}: selector {sel} does not match its pod template labels")

    # Services: a selector that matches a workload, target ports that exist.
    for s in by_kind.get("Service", []):
        ns = s["metadata"].get("namespace")
        sel = (s.get("spec") or {}).get("selector") or {}
        matches = [
            w
            for w in workloads
            if w["metadata"].get("namespace") == ns and all(pod_labels(w).get(k) == v for k, v in sel.items())
        ]
        checks += 1
        if not matches:
            problems.append(f"{ident(s)}: selector {sel} matches no workload")
            continue
        for port in (s.get("spec") or {}).get("ports") or []:
            tp = port.get("targetPort", port.get("port"))
            found = any(
                (p.get("name") == tp if isinstance(tp, str) else p.get("containerPort") == tp)
                for w in matches
                for c in containers(pod_spec(w))
                for p in c.get("ports") or []
            )
            checks += 1
            if not found:
                problems.append(
                    f"{ident(s)}: port {port.get('name')} targets {tp}, which no selected container exposes"
                )
    for w in by_kind.get("StatefulSet", []):
        checks += 1
        if w["spec"].get("serviceName") not in names("Service", w["metadata"].get("namespace")):
            problems.append(f"{ident(w)}: serviceName {w['spec'].get('serviceName')} is not a Service")

    for pdb in by_kind.get("PodDisruptionBudget", []):
        sel = ((pdb.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        checks += 1
        if not any(all(pod_labels(w).get(k) == v for k, v in sel.items()) for w in workloads):
            problems.append(f"{ident(pdb)}: selector matches no workload")

    for b in by_kind.get("ClusterRoleBinding", []) + by_kind.get("RoleBinding", []):
        checks += 1
        ref = b.get("roleRef") or {}
        if ref.get("name") not in names(ref.get("kind", "ClusterRole")):
            problems.append(f"{ident(b)}: roleRef {ref.get('kind')} {ref.get('name')} is not defined")
        for sub in b.get("subjects") or []:
            if sub.get("kind") == "ServiceAccount" and sub.get("name") not in names(
                "ServiceAccount", sub.get("namespace")
            ):
                problems.append(
                    f"{ident(b)}: subject ServiceAccount {sub.get('namespace')}/{sub.get('name')} is not defined"
                )

    # Webhook: service, port, CA injection, certificate names, policy.
    for vw in by_kind.get("ValidatingWebhookConfiguration", []):
        inject = ((vw.get("metadata") or {}).get("annotations") or {}).get("cert-manager.io/inject-ca-from")
        for hook in vw.get("webhooks") or []:
            where = f"{ident(vw)} {hook.get('name')}"
            svc_ref = (hook.get("clientConfig") or {}).get("service") or {}
            svc = next(
                (
                    s
                    for s in by_kind.get("Service", [])
                    if s["metadata"]["name"] == svc_ref.get("name")
                    and s["metadata"].get("namespace") == svc_ref.get("namespace")
                ),
                None,
            )
            checks += 1
            if svc is None:
                problems.append(f"{where}: Service {svc_ref.get('namespace')}/{svc_ref.get('name')} is not defined")
            elif svc_ref.get("port", 443) not in [p.get("port") for p in svc["spec"].get("ports") or []]:
                problems.append(f"{where}: Service {svc_ref.get('name')} has no port {svc_ref.get('port', 443)}")
            checks += 1
            if svc_ref.get("path") != "/v1/k8s/admission":
                problems.append(f"{where}: path is {svc_ref.get('path')}, not /v1/k8s/admission")
            checks += 1
            if inject:
                cns, cname = inject.split("/", 1)
                cert = next(
                    (
                        c
                        for c in by_kind.get("Certificate", [])
                        if c["metadata"]["name"] == cname and c["metadata"].get("namespace") == cns
                    ),
                    None,
                )
                if cert is None:
                    problems.append(f"{where}: inject-ca-from names Certificate {inject}, which is not defined")
                else:
                    want = f"{svc_ref.get('name')}.{svc_ref.get('namespace')}.svc"
                    if want not in (cert["spec"].get("dnsNames") or []):
                        problems.append(f"{where}: Certificate {inject} does not name {want}")
                    issuer = (cert["spec"].get("issuerRef") or {}).get("name")
                    if issuer not in names("Issuer", cns) | names("ClusterIssuer"):
                        problems.append(f"{where}: Certificate {inject} is issued by unknown Issuer {issuer}")
                    # The proxy must serve the certificate's Secret.
                    served = {
                        v["secret"]["secretName"]
                        for w in workloads
                        for v in pod_spec(w).get("volumes") or []
                        if "secret" in v
                    }
                    if cert["spec"].get("secretName") not in served:
                        problems.append(f"{where}: no pod mounts the serving Secret {cert['spec'].get('secretName')}")
            elif not (hook.get("clientConfig") or {}).get("caBundle"):
                problems.append(f"{where}: neither a caBundle nor cert-manager.io/inject-ca-from")
            expect = {
                "admissionReviewVersions": ["v1"],
                "sideEffects": "NoneOnDryRun",
            }
            for k, v in expect.items():
                checks += 1
                if hook.get(k) != v:
                    problems.append(f"{where}: {k} is {hook.get(k)!r}, want {v!r}")
            checks += 1
            if hook.get("failurePolicy") not in ("Fail", "Ignore"):
                problems.append(f"{where}: failurePolicy {hook.get('failurePolicy')!r}")
            rules = hook.get("rules") or []
            checks += 1
            if not any("pods" in (r.get("resources") or []) and "CREATE" in (r.get("operations") or []) for r in rules):
                problems.append(f"{where}: no rule for pods CREATE")
            excluded = set()
            for e in (hook.get("namespaceSelector") or {}).get("matchExpressions") or []:
                if e.get("key") == "kubernetes.io/metadata.name" and e.get("operator") == "NotIn":
                    excluded |= set(e.get("values") or [])
            checks += 1
            if "kube-system" not in excluded or svc_ref.get("namespace") not in excluded:
                problems.append(
                    f"{where}: namespaceSelector must exclude kube-system and {svc_ref.get('namespace')} (excludes {sorted(excluded)})"
                )
            timeout = hook.get("timeoutSeconds", 10)
            proc = [w for w in workloads if component(w) == "processor"]
            adm = [arg_value(c, "--admission-timeout-s") for w in proc for c in containers(pod_spec(w))]
            adm = [int(a) for a in adm if a]
            checks += 1
            if not (1 <= timeout <= 30) or any(a >= timeout for a in adm):
                problems.append(
                    f"{where}: timeoutSeconds {timeout} must be within 1..30 and above --admission-timeout-s {adm}"
                )

    # The webhook proxy: token variable set, cert mount matches the template.
    for w in workloads:
        for c in containers(pod_spec(w)):
            if c.get("name") != "webhook-proxy":
                continue
            env = {e["name"]: e for e in c.get("env") or []}
            checks += 1
            if "GPULEDGER_WEBHOOK_TOKEN" not in env:
                problems.append(f"{ident(w)}: webhook-proxy has no GPULEDGER_WEBHOOK_TOKEN")
            mounts = {m["mountPath"]: m for m in c.get("volumeMounts") or []}
            checks += 1
            if (
                "/etc/gpuledger/webhook-tls" not in mounts
                or "/etc/nginx/conf.d" not in mounts
                or "/etc/nginx/templates" not in mounts
            ):
                problems.append(f"{ident(w)}: webhook-proxy lacks one of its mounts (templates, conf.d, webhook-tls)")

    # Settings shared through the ConfigMap.
    for cm in by_kind.get("ConfigMap", []):
        data = cm.get("data") or {}
        if "GPULEDGER_KAFKA_BOOTSTRAP" in data:
            # The bootstrap's listener and security: security.py, per client.
            prefix = data.get("GPULEDGER_TOPIC_PREFIX", "")
            if by_kind.get("Kafka"):
                topics = {
                    (t.get("spec") or {}).get("topicName") or t["metadata"]["name"]
                    for t in by_kind.get("KafkaTopic", [])
                }
                for base in ("telemetry", "ledger", "decisions", "dlq"):
                    checks += 1
                    if f"{prefix}gpuledger.{base}" not in topics:
                        problems.append(f"KafkaTopic {prefix}gpuledger.{base} is missing (topics: {sorted(topics)})")
            pairs = data.get("GPULEDGER_K8S_NAMESPACES", "")
            ns_map = dict(p.split("=", 1) for p in pairs.split(",") if "=" in p)
            checks += 1
            if pairs and len(ns_map) != len([p for p in pairs.split(",") if p]):
                problems.append(f"{ident(cm)}: GPULEDGER_K8S_NAMESPACES {pairs!r} is not NS=TENANT,…")
            for other in by_kind.get("ConfigMap", []):
                tm = (other.get("data") or {}).get("tenant-map.json")
                if tm is None:
                    continue
                checks += 1
                try:
                    parsed = json.loads(tm)
                except json.JSONDecodeError as e:
                    problems.append(f"{ident(other)}: tenant-map.json is not JSON: {e}")
                    continue
                extra = set(parsed) - {"namespaces", "slurm_accounts", "users"}
                if extra:
                    problems.append(f"{ident(other)}: tenant-map.json has unknown keys {sorted(extra)}")
                if (parsed.get("namespaces") or {}) != ns_map:
                    problems.append(
                        f"{ident(other)}: tenant-map.json namespaces {parsed.get('namespaces')} differ from GPULEDGER_K8S_NAMESPACES {ns_map}"
                    )
    for t in by_kind.get("KafkaTopic", []) + by_kind.get("KafkaNodePool", []):
        cluster = ((t.get("metadata") or {}).get("labels") or {}).get("strimzi.io/cluster")
        checks += 1
        if cluster not in names("Kafka", t["metadata"].get("namespace")):
            problems.append(f"{ident(t)}: strimzi.io/cluster {cluster} is not a Kafka in its namespace")

    # Tokens: the proxy's token must be a scheduler token of the control API.
    for sec in by_kind.get("Secret", []):
        sd = sec.get("stringData") or {}
        if "processor-api-tokens" not in sd:
            continue
        specs = [s.strip() for s in sd["processor-api-tokens"].split(",") if s.strip()]
        checks += 1
        if f"scheduler:{sd.get('webhook-token')}" not in specs:
            problems.append(f"{ident(sec)}: webhook-token is not a scheduler: token in processor-api-tokens")
        for key in ("processor-api-tokens", "query-tokens"):
            for spec in [s.strip() for s in sd.get(key, "").split(",") if s.strip()]:
                role, _, rest = spec.partition(":")
                token = rest.split(":", 1)[1] if role == "lead" and ":" in rest else rest
                checks += 1
                if role not in ("admin", "scheduler", "finance", "lead") or len(token) < 8:
                    problems.append(f"{ident(sec)}: {key}: {role}:… is not ROLE:TOKEN with a token of 8+ characters")

    # The collector's node access.
    for w in workloads:
        if component(w) != "collector":
            continue
        ps = pod_spec(w)
        c = next(c for c in ps["containers"] if c["name"] == "collector")
        env = {e["name"]: e for e in c.get("env") or []}
        mounts = {m["mountPath"]: m for m in c.get("volumeMounts") or []}
        expectations = {
            "hostPID": ps.get("hostPID") is True,
            "runtimeClassName nvidia": ps.get("runtimeClassName") == "nvidia",
            "NVIDIA_VISIBLE_DEVICES=all": (env.get("NVIDIA_VISIBLE_DEVICES") or {}).get("value") == "all",
            "NVIDIA_DRIVER_CAPABILITIES=utility": (env.get("NVIDIA_DRIVER_CAPABILITIES") or {}).get("value")
            == "utility",
            "node name from spec.nodeName": any(
                ((e.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath") == "spec.nodeName"
                for e in env.values()
            ),
            "--proc-root mounted read-only": (mounts.get(arg_value(c, "--proc-root") or "") or {}).get("readOnly")
            is True,
            "--spool-dir on a hostPath": any(
                m["mountPath"] == arg_value(c, "--spool-dir")
                and "hostPath" in next((v for v in ps.get("volumes") or [] if v["name"] == m["name"]), {})
                for m in c.get("volumeMounts") or []
            ),
            "/sys/fs/cgroup read-only": any(
                (v.get("hostPath") or {}).get("path") == "/sys/fs/cgroup"
                and any(m["name"] == v["name"] and m.get("readOnly") for m in c.get("volumeMounts") or [])
                for v in ps.get("volumes") or []
            ),
        }
        for what, good in expectations.items():
            checks += 1
            if not good:
                problems.append(f"{ident(w)}: collector lacks {what}")

    for p in problems:
        R.fail(section, f"{label}: {p}")
    if not problems:
        R.ok(section, f"{label}: {checks} cross-references and settings agree")


SAMPLE_PODS = {
    "whole GPU in limits": ({"containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}, True),
    "MIG slice in limits": (
        {"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "nvidia.com/mig-3g.71gb": "1"}}}]},
        True,
    ),
    "GPU in requests only": ({"containers": [{"name": "a", "resources": {"requests": {"nvidia.com/gpu": "1"}}}]}, True),
    "GPU in an init container": (
        {
            "initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "containers": [{"name": "a"}],
        },
        True,
    ),
    "GPU in the second container": (
        {
            "containers": [
                {"name": "a", "resources": {"limits": {"cpu": "1"}}},
                {"name": "b", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
            ]
        },
        True,
    ),
    "CPU only": ({"containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}, False),
    "no resources": ({"containers": [{"name": "a"}]}, False),
    "empty resources": ({"containers": [{"name": "a", "resources": {}}]}, False),
    "another vendor's device": ({"containers": [{"name": "a", "resources": {"limits": {"amd.com/gpu": "1"}}}]}, False),
    "init container without GPU": (
        {"initContainers": [{"name": "i", "resources": {"limits": {"cpu": "1"}}}], "containers": [{"name": "a"}]},
        False,
    ),
}


def check_match_conditions(objs: list[dict], section: str, label: str) -> None:
    try:
        import celpy
    except ImportError:
        R.skip(section, "cel-python is not installed: matchConditions not evaluated")
        return
    for vw in [o for o in objs if o["kind"] == "ValidatingWebhookConfiguration"]:
        for hook in vw.get("webhooks") or []:
            for mc in hook.get("matchConditions") or []:
                env = celpy.Environment()
                try:
                    prog = env.program(env.compile(mc["expression"]))
                except Exception as e:  # noqa: BLE001 - any compile error is a failure
                    R.fail(section, f"{label}: matchCondition {mc['name']} does not compile: {e}")
                    continue
                wrong = []
                for case, (spec, want) in SAMPLE_PODS.items():
                    pod = {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": "p", "namespace": "ns"},
                        "spec": spec,
                    }
                    try:
                        got = bool(prog.evaluate({"object": celpy.json_to_cel(pod)}))
                    except Exception as e:  # noqa: BLE001
                        got = f"error {e}"
                    if got != want:
                        wrong.append(f"{case}: {got}, want {want}")
                R.check(
                    not wrong,
                    section,
                    f"{label}: matchCondition {mc['name']} selects exactly the GPU pods ({len(SAMPLE_PODS)} sample pods)",
                    "; ".join(wrong),
                )
