#!/usr/bin/env python3
"""Offline checks of deploy/: Kubernetes manifests, the Helm chart, the
Prometheus files, the systemd units and the webhook's TLS proxy.

Run through tests/deploy/validate.sh, which prepares the tools (a virtual
environment with kubernetes-validate, PyYAML, cel-python and promql-parser;
helm; CRD schemas; nginx) and passes their paths. Every check prints one
line (PASS, FAIL, SKIP or NOTE); the summary at the end counts them, and the
exit status is 1 when anything failed.

The checks live beside this file: objects.py (loading, schemas),
consistency.py (references between objects, CEL), security.py (Kafka TLS,
SCRAM users and ACLs, NetworkPolicies), manifests.py (deploy/k8s and the
chart), prom.py, units.py (systemd, flags), proxy.py, report.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from manifests import check_helm, check_k8s
from objects import NO_SCHEMA, CrdSchemas
from prom import check_prometheus
from proxy import check_proxy
from report import R
from units import check_flags, check_systemd


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--k8s-versions", default="1.30.0 1.37.0")
    ap.add_argument("--crd-dir", type=Path, action="append", default=[])
    ap.add_argument("--helm")
    ap.add_argument("--kubectl")
    ap.add_argument("--promtool")
    ap.add_argument("--systemd-analyze")
    ap.add_argument("--nginx")
    ap.add_argument("--bin", action="append", default=[], help="NAME=PATH of a built gpuledger binary")
    ap.add_argument("--require-all", action="store_true", help="a skipped check fails the run")
    a = ap.parse_args()
    R.require_all = a.require_all
    a.work.mkdir(parents=True, exist_ok=True)

    versions = a.k8s_versions.split()
    crds = CrdSchemas(a.crd_dir)
    if crds.schemas:
        R.note("k8s manifests", f"CRD schemas from {', '.join(crds.sources)}")

    static = check_k8s(a.root, versions, crds, a.kubectl)
    check_helm(a.root, a.helm, versions, crds, static)
    check_prometheus(a.root, a.promtool)
    check_systemd(a.root, a.systemd_analyze, a.work)
    check_proxy(a.root, a.nginx, a.work)
    for kind in sorted(NO_SCHEMA):
        R.skip("k8s manifests", f"no CRD schema for {kind}: its objects were checked for structure only")
    check_flags(a.root, {k: Path(v) for k, v in (b.split("=", 1) for b in a.bin)}, static)
    return R.summary()


if __name__ == "__main__":
    sys.exit(main())
