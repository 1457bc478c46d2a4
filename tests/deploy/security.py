"""Kafka security and network reach: the clients' TLS and SCRAM settings
against the Strimzi listener and KafkaUsers, the KafkaUsers' ACLs, the
components that must hold no Kafka credentials, and which ports the
NetworkPolicies open beyond the namespace."""

from __future__ import annotations

from collections import defaultdict
from pathlib import PurePosixPath

from objects import arg_value, component, containers, ident, pod_labels, pod_spec
from report import R

TOPICS = ("telemetry", "ledger", "decisions", "dlq")
# Subcommands that talk to Kafka; every other container (the query service,
# `compact`, the webhook proxy) must hold no Kafka credentials.
KAFKA_SUBCOMMANDS = {
    "gpuledger-collector": {"run", "job", "simulate"},
    "gpuledger-processor": {"run", "catch-up", "replay"},
}
CREDENTIAL_ENV = (
    "GPULEDGER_KAFKA_SASL_USERNAME",
    "GPULEDGER_KAFKA_SASL_PASSWORD",
    "GPULEDGER_KAFKA_SASL_PASSWORD_FILE",
    "GPULEDGER_KAFKA_CA",
)


def selects(selector: dict | None, labels: dict) -> bool:
    """A Kubernetes label selector (matchLabels, matchExpressions) on labels."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _user_operator(kafka: dict) -> dict:
    return ((kafka.get("spec") or {}).get("entityOperator") or {}).get("userOperator") or {}


def user_namespace(kafka: dict) -> str:
    """Where the Kafka's user operator looks for KafkaUsers and writes their Secrets."""
    return _user_operator(kafka).get("watchedNamespace") or kafka["metadata"]["namespace"]


def kafka_issued_secrets(objs: list[dict], ns: str) -> set[str]:
    """Secrets of namespace ns that exist once Strimzi runs: each KafkaUser's
    (written by the user operator) and the copy of the cluster CA that the
    deploy/ comments tell the operator to make beside them."""
    kafkas = [o for o in objs if o["kind"] == "Kafka"]
    out = set()
    for u in (o for o in objs if o["kind"] == "KafkaUser" and o["metadata"].get("namespace") == ns):
        cluster = ((u["metadata"].get("labels") or {})).get("strimzi.io/cluster")
        k = next((k for k in kafkas if k["metadata"]["name"] == cluster), None)
        prefix = (_user_operator(k).get("secretPrefix") or "") if k else ""
        out.add(prefix + u["metadata"]["name"])
    for k in kafkas:
        if user_namespace(k) == ns:
            out.add(f"{k['metadata']['name']}-cluster-ca-cert")
    return out


def _bootstrap_host(kafka: dict) -> str:
    return f"{kafka['metadata']['name']}-kafka-bootstrap.{kafka['metadata']['namespace']}.svc"


def _configmaps(by_kind: dict[str, list[dict]], ns: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in by_kind.get("ConfigMap", []) if o["metadata"].get("namespace") == ns}


def _env(c: dict, configmaps: dict[str, dict]) -> dict[str, object]:
    """A container's environment: literal values, or ('secret', name, key)."""
    env: dict[str, object] = {}
    for ef in c.get("envFrom") or []:
        name = (ef.get("configMapRef") or {}).get("name")
        env.update((configmaps.get(name) or {}).get("data") or {})
    for e in c.get("env") or []:
        ref = e.get("valueFrom") or {}
        if "secretKeyRef" in ref:
            env[e["name"]] = ("secret", ref["secretKeyRef"]["name"], ref["secretKeyRef"]["key"])
        elif "value" in e:
            env[e["name"]] = str(e["value"])
        else:
            env[e["name"]] = ("ref",)
    return env


def _file_source(ps: dict, c: dict, path: str) -> tuple[str, str] | None:
    """(Secret, key) a file in the container comes from, or None."""
    p = PurePosixPath(path)
    vols = {v["name"]: v for v in ps.get("volumes") or []}
    for m in c.get("volumeMounts") or []:
        base = PurePosixPath(m["mountPath"])
        if p.parent != base or "subPath" in m:
            continue
        sec = (vols.get(m["name"]) or {}).get("secret")
        if not sec:
            return None
        items = sec.get("items")
        if items is None:
            return sec["secretName"], p.name
        item = next((i for i in items if i.get("path") == p.name), None)
        return (sec["secretName"], item["key"]) if item else None
    return None


def _allows(user: dict, rtype: str, name: str, op: str) -> bool:
    for acl in ((user.get("spec") or {}).get("authorization") or {}).get("acls") or []:
        if acl.get("type", "allow") != "allow":
            continue
        r = acl.get("resource") or {}
        if r.get("type") != rtype:
            continue
        if rtype != "cluster":
            pattern, rname = r.get("patternType", "literal"), r.get("name", "")
            if rname != "*" and not (name == rname if pattern == "literal" else name.startswith(rname)):
                continue
        ops = acl.get("operations") or []
        if op in ops or "All" in ops:
            return True
    return False


def check_security(objs: list[dict], section: str, label: str) -> None:
    by_kind: dict[str, list[dict]] = defaultdict(list)
    for o in objs:
        by_kind[o["kind"]].append(o)
    problems: list[str] = []
    checks = 0
    kafkas = by_kind.get("Kafka", [])
    users = {(u["metadata"].get("namespace"), u["metadata"]["name"]): u for u in by_kind.get("KafkaUser", [])}
    workloads = [o for o in objs if pod_spec(o) is not None]
    used_users: dict[tuple, list[tuple[str, dict, dict]]] = defaultdict(list)
    credential_secrets: set[tuple] = set()

    # The Kafka clients: TLS, CA and login as the broker's listener expects.
    others = []
    for w in workloads:
        ns, ps = w["metadata"].get("namespace"), pod_spec(w)
        cms = _configmaps(by_kind, ns)
        for c in containers(ps):
            binary = PurePosixPath(str((c.get("command") or [""])[0])).name
            sub = str((c.get("args") or [""])[0])
            if sub not in KAFKA_SUBCOMMANDS.get(binary, set()):
                others.append((w, ps, c, _env(c, cms)))
                continue
            env = _env(c, cms)
            where = f"{ident(w)} {c['name']}"
            protocol = env.get("GPULEDGER_KAFKA_SECURITY_PROTOCOL", "plaintext")
            for server in str(env.get("GPULEDGER_KAFKA_BOOTSTRAP", "")).split(","):
                host, _, port = server.strip().rpartition(":")
                k = next((k for k in kafkas if host == _bootstrap_host(k)), None)
                checks += 1
                if k is None:
                    if kafkas:
                        problems.append(f"{where}: bootstrap {server} is not a Strimzi cluster's bootstrap service")
                    continue
                listener = next(
                    (x for x in k["spec"]["kafka"].get("listeners") or [] if str(x.get("port")) == port), None
                )
                if listener is None:
                    problems.append(f"{where}: bootstrap {server}: {ident(k)} has no listener on {port}")
                    continue
                auth = (listener.get("authentication") or {}).get("type")
                if bool(listener.get("tls")) != (protocol != "plaintext"):
                    problems.append(f"{where}: protocol {protocol}, but listener {listener['name']} has tls {listener.get('tls')}")
                if (auth == "scram-sha-512") != (protocol == "sasl_ssl"):
                    problems.append(f"{where}: protocol {protocol}, but listener {listener['name']} authentication {auth}")
                ca = env.get("GPULEDGER_KAFKA_CA")
                want_ca = (f"{k['metadata']['name']}-cluster-ca-cert", "ca.crt")
                if protocol != "plaintext" and isinstance(ca, str) and _file_source(ps, c, ca) != want_ca:
                    problems.append(f"{where}: GPULEDGER_KAFKA_CA {ca} is not ca.crt of {k['metadata']['name']}-cluster-ca-cert")
            checks += 1
            if protocol == "plaintext":
                extra = [n for n in CREDENTIAL_ENV if n in env]
                if extra:
                    problems.append(f"{where}: plaintext, yet {', '.join(extra)} set (the binary refuses them)")
                continue
            ca = env.get("GPULEDGER_KAFKA_CA")
            if isinstance(ca, str) and _file_source(ps, c, ca) is None:
                problems.append(f"{where}: GPULEDGER_KAFKA_CA {ca} is no file of a mounted Secret")
            if protocol != "sasl_ssl":
                continue
            username = env.get("GPULEDGER_KAFKA_SASL_USERNAME")
            pw_file = env.get("GPULEDGER_KAFKA_SASL_PASSWORD_FILE")
            checks += 1
            if isinstance(env.get("GPULEDGER_KAFKA_SASL_PASSWORD"), str):
                problems.append(f"{where}: GPULEDGER_KAFKA_SASL_PASSWORD is a literal value, not from a Secret")
            if not isinstance(username, str) or not username:
                problems.append(f"{where}: sasl_ssl without GPULEDGER_KAFKA_SASL_USERNAME")
                continue
            source = _file_source(ps, c, pw_file) if isinstance(pw_file, str) else None
            pw_dir = PurePosixPath(pw_file).parent if isinstance(pw_file, str) else None
            mount = next((m for m in c.get("volumeMounts") or [] if PurePosixPath(m["mountPath"]) == pw_dir), {})
            if source is None:
                problems.append(f"{where}: GPULEDGER_KAFKA_SASL_PASSWORD_FILE {pw_file} is no file of a mounted Secret")
                continue
            credential_secrets.add((ns, source[0]))
            if not mount.get("readOnly"):
                problems.append(f"{where}: the password's Secret is not mounted read-only")
            if source[1] != "password":
                problems.append(f"{where}: the password file is key {source[1]} of Secret {source[0]}, not `password`")
            if users or kafkas:
                u = users.get((ns, username))
                checks += 1
                if u is None:
                    problems.append(f"{where}: GPULEDGER_KAFKA_SASL_USERNAME {username} is no KafkaUser in {ns}")
                    continue
                used_users[(ns, username)].append((binary, w, c))
                cluster = (u["metadata"].get("labels") or {}).get("strimzi.io/cluster")
                k = next((k for k in kafkas if k["metadata"]["name"] == cluster), None)
                prefix = (_user_operator(k).get("secretPrefix") or "") if k else ""
                if source[0] != prefix + username:
                    problems.append(f"{where}: mounts Secret {source[0]}, but KafkaUser {username}'s is {prefix + username}")
                if ((u.get("spec") or {}).get("authentication") or {}).get("type") != "scram-sha-512":
                    problems.append(f"{where}: KafkaUser {username} is not a scram-sha-512 user")
                if env.get("GPULEDGER_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512") != "SCRAM-SHA-512":
                    problems.append(f"{where}: Strimzi's SCRAM users need GPULEDGER_KAFKA_SASL_MECHANISM SCRAM-SHA-512")
    for (ns, name), u in users.items():
        credential_secrets.add((ns, name))

    # What must hold no Kafka credentials: the query service, compaction, the proxy.
    for w, ps, c, env in others:
        ns = w["metadata"].get("namespace")
        where = f"{ident(w)} {c['name']}"
        checks += 1
        bad = [n for n in CREDENTIAL_ENV if n in env]
        if isinstance(env.get("GPULEDGER_KAFKA_OPTIONS"), tuple):
            bad.append("GPULEDGER_KAFKA_OPTIONS from a Secret")
        mounted = {
            v["secret"]["secretName"]
            for v in ps.get("volumes") or []
            if "secret" in v and any(m["name"] == v["name"] for m in c.get("volumeMounts") or [])
        }
        bad += [f"Secret {s}" for s in sorted(mounted) if (ns, s) in credential_secrets]
        if bad:
            problems.append(f"{where} talks to no Kafka, yet holds Kafka credentials: {', '.join(bad)}")

    # The KafkaUsers: where the user operator looks, and least-privilege ACLs.
    for (ns, name), u in users.items():
        where = ident(u)
        cluster = (u["metadata"].get("labels") or {}).get("strimzi.io/cluster")
        k = next((k for k in kafkas if k["metadata"]["name"] == cluster), None)
        checks += 1
        if kafkas and k is None:
            problems.append(f"{where}: strimzi.io/cluster {cluster} is not a Kafka")
        if k is not None:
            if user_namespace(k) != ns:
                problems.append(f"{where}: {ident(k)}'s user operator watches {user_namespace(k)}, not {ns}")
            if ((k["spec"]["kafka"].get("authorization")) or {}).get("type") != "simple":
                problems.append(f"{where}: {ident(k)} has no `simple` authorization, so the ACLs are not enforced")
        if not used_users.get((ns, name)):
            if workloads:
                problems.append(f"{where}: no pod logs in as {name}")
            continue
        acls = ((u.get("spec") or {}).get("authorization") or {}).get("acls") or []
        for acl in acls:
            ops = acl.get("operations") or []
            rtype = (acl.get("resource") or {}).get("type")
            if "All" in ops or (rtype == "cluster" and set(ops) - {"IdempotentWrite"}):
                problems.append(f"{where}: ACL {acl.get('resource')} {ops} grants more than the clients use")
            if rtype == "topic" and (acl.get("resource") or {}).get("name") in ("*", ""):
                problems.append(f"{where}: ACL on every topic")
        for binary, w, c in used_users[(ns, name)]:
            cms = _configmaps(by_kind, ns)
            prefix = str(_env(c, cms).get("GPULEDGER_TOPIC_PREFIX", ""))
            topic = {t: f"{prefix}gpuledger.{t}" for t in TOPICS}
            must, never = [], []
            if binary == "gpuledger-collector":
                must = [("topic", topic[t], "Write") for t in ("telemetry", "ledger")]
                never = [("topic", topic[t], "Read") for t in TOPICS]
                never += [("topic", topic[t], "Write") for t in ("decisions", "dlq")]
                if any((a.get("resource") or {}).get("type") in ("group", "transactionalId") for a in acls):
                    problems.append(f"{where}: the collector consumes nothing and uses no transactions, yet has group or transactionalId ACLs")
            else:
                group = arg_value(c, "--group-id") or str(_env(c, cms).get("GPULEDGER_GROUP_ID", "gpuledger-processor"))
                must = [("topic", topic[t], "Read") for t in TOPICS]
                must += [("topic", topic[t], "Write") for t in ("ledger", "decisions", "dlq")]
                must += [("group", g, "Read") for g in (group, f"{group}-ledger", "gpuledger-control-api")]
                must += [("transactionalId", f"{group}-ledger-ledger-0", "Write")]
                never = [("topic", topic["telemetry"], "Write")]
            must.append(("cluster", "", "IdempotentWrite"))
            for rtype, rname, op in must:
                checks += 1
                if not _allows(u, rtype, rname, op):
                    problems.append(f"{where}: {ident(w)} needs {op} on {rtype} {rname}".rstrip())
            for rtype, rname, op in never:
                checks += 1
                if _allows(u, rtype, rname, op):
                    problems.append(f"{where}: allows {op} on {rtype} {rname}, which {binary} never needs")
            for a in acls:
                r = a.get("resource") or {}
                if kafkas and r.get("type") == "topic" and r.get("patternType", "literal") == "literal":
                    names = {
                        (t.get("spec") or {}).get("topicName") or t["metadata"]["name"]
                        for t in by_kind.get("KafkaTopic", [])
                    }
                    checks += 1
                    if r.get("name") not in names:
                        problems.append(f"{where}: ACL names topic {r.get('name')}, which is no KafkaTopic")

    # The brokers: with ACLs on, no listener without a login; Strimzi's own
    # NetworkPolicy (networkPolicyPeers) must still let the clients in.
    for k in kafkas:
        simple = (k["spec"]["kafka"].get("authorization") or {}).get("type") == "simple"
        for listener in k["spec"]["kafka"].get("listeners") or []:
            checks += 1
            if simple and not listener.get("authentication"):
                problems.append(f"{ident(k)}: listener {listener['name']} has no authentication, so ACLs are bypassed as ANONYMOUS")
            peers = listener.get("networkPolicyPeers")
            if not peers:
                continue
            for (ns, name), logins in used_users.items():
                for _, w, _c in logins:
                    checks += 1
                    ns_labels = {"kubernetes.io/metadata.name": ns}
                    if not any(
                        selects(p.get("namespaceSelector"), ns_labels) and selects(p.get("podSelector"), pod_labels(w))
                        for p in peers
                        if "ipBlock" not in p
                    ):
                        problems.append(f"{ident(k)}: listener {listener['name']}'s networkPolicyPeers shut out {ident(w)}")

    net_problems, exposure = _network_policies(by_kind, workloads)
    problems += net_problems
    for p in problems:
        R.fail(section, f"{label}: {p}")
    if not problems:
        R.ok(section, f"{label}: Kafka TLS, SCRAM logins, ACLs and credentials: {checks} checks agree")
    if by_kind.get("NetworkPolicy") and not net_problems:
        R.ok(
            section,
            f"{label}: NetworkPolicies deny every pod by default; open beyond the namespace only "
            + ", ".join(exposure),
        )


def _port_number(ref, c_ports: dict[str, int], numbers: set[int]) -> int | None:
    if isinstance(ref, int):
        return ref if ref in numbers else None
    return c_ports.get(str(ref))


def _listen_port(c: dict, flag: str) -> int | None:
    v = arg_value(c, flag)
    if not v or v == "off" or ":" not in v:
        return None
    return int(v.rsplit(":", 1)[1])


def _network_policies(by_kind: dict[str, list[dict]], workloads: list[dict]) -> tuple[list[str], list[str]]:
    """Every pod denied ingress by default; beyond the namespace only the
    webhook proxy, the control API and the query service's ports, and each
    metrics port to the namespaces selected for Prometheus."""
    policies = by_kind.get("NetworkPolicy", [])
    if not policies:
        return [], []
    problems: list[str] = []
    exposure: list[str] = []
    hooks = [
        (h.get("clientConfig") or {}).get("service") or {}
        for vw in by_kind.get("ValidatingWebhookConfiguration", [])
        for h in vw.get("webhooks") or []
    ]
    for pol in policies:
        ns = pol["metadata"].get("namespace")
        if not any(
            w["metadata"].get("namespace") == ns and selects(pol["spec"].get("podSelector"), pod_labels(w))
            for w in workloads
        ):
            problems.append(f"{ident(pol)} selects no gpuledger pod")
        if "Egress" in (pol["spec"].get("policyTypes") or []):
            problems.append(f"{ident(pol)} restricts egress (DNS, Kafka and the API server would need rules)")
    for w in workloads:
        ns, ps, labels = w["metadata"].get("namespace"), pod_spec(w), pod_labels(w)
        mine = [
            p
            for p in policies
            if p["metadata"].get("namespace") == ns
            and selects(p["spec"].get("podSelector"), labels)
            and "Ingress" in (p["spec"].get("policyTypes") or ["Ingress"])
        ]
        if not any(not p["spec"].get("ingress") for p in mine):
            problems.append(f"{ident(w)}: no default-deny ingress NetworkPolicy selects its pods")
        c_ports = {p["name"]: p["containerPort"] for c in containers(ps) for p in c.get("ports") or [] if p.get("name")}
        numbers = {p["containerPort"] for c in containers(ps) for p in c.get("ports") or []}
        public: set[int] = set()  # reachable from any source is fine
        metrics: set[int] = set()  # /metrics: Prometheus' namespaces only
        for svc in by_kind.get("Service", []):
            selector = {"matchLabels": (svc.get("spec") or {}).get("selector") or {}}
            if svc["metadata"].get("namespace") != ns or not selects(selector, labels):
                continue
            for sp in svc["spec"].get("ports") or []:
                if any(
                    (h.get("name"), h.get("namespace"), h.get("port", 443)) == (svc["metadata"]["name"], ns, sp.get("port"))
                    for h in hooks
                ):
                    n = _port_number(sp.get("targetPort", sp.get("port")), c_ports, numbers)
                    public |= {n} if n else set()
        for c in containers(ps):
            binary = PurePosixPath(str((c.get("command") or [""])[0])).name
            flags = {"gpuledger-processor": ("--api-listen",), "gpuledger-query": ("--listen", "--pg-listen")}
            public |= {p for f in flags.get(binary, ()) if (p := _listen_port(c, f))}
            if binary == "gpuledger-collector":
                metrics |= {p for p in [_listen_port(c, "--listen")] if p}
                jobs = arg_value(c, "--jobs-listen")
                if jobs and jobs != "off" and not jobs.startswith(("127.", "[::1]", "localhost")):
                    problems.append(f"{ident(w)}: the collector's job endpoint listens on {jobs}, beyond the pod")
        annotations = (((w.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations") or {}
        if "prometheus.io/port" in annotations:
            metrics.add(int(annotations["prometheus.io/port"]))
        opened: dict[int, str] = {}
        for p in mine:
            for rule in p["spec"].get("ingress") or []:
                peers = rule.get("from") or []
                beyond = [x for x in peers if "namespaceSelector" in x or "ipBlock" in x]
                if peers and not beyond:
                    continue  # same namespace only
                anywhere = not peers or any(
                    (x.get("ipBlock") or {}).get("cidr") in ("0.0.0.0/0", "::/0")
                    or ("namespaceSelector" in x and not x["namespaceSelector"])
                    for x in beyond
                )
                if not rule.get("ports"):
                    problems.append(f"{ident(p)}: a rule opens every port of {ident(w)} beyond the namespace")
                    continue
                for rp in rule["ports"]:
                    n = _port_number(rp.get("port"), c_ports, numbers)
                    if n is None:
                        problems.append(f"{ident(p)}: port {rp.get('port')} is no port of {ident(w)}")
                        continue
                    if anywhere or opened.get(n) != "any":
                        opened[n] = "any" if anywhere else "selected peers"
        for n, reach in sorted(opened.items()):
            if n in public:
                exposure.append(f"{component(w)} {n} ({reach})")
            elif n in metrics and reach != "any":
                exposure.append(f"{component(w)} {n} (metrics, Prometheus only)")
            elif n in metrics:
                problems.append(f"{ident(w)}: metrics port {n} is open to every namespace, not only Prometheus'")
            else:
                problems.append(f"{ident(w)}: port {n} is open beyond the namespace ({reach})")
    return problems, sorted(set(exposure))
