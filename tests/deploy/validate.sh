#!/usr/bin/env bash
# Validates everything under deploy/ without a cluster:
#   - deploy/k8s: YAML, kubernetes-validate --strict (Kubernetes 1.30 and
#     1.37 schemas), cert-manager / Strimzi / Prometheus Operator objects
#     against their CRD schemas (or for structure when those cannot be had),
#     kustomization.yaml, and the references between objects (Services,
#     Secrets, ConfigMaps, the webhook's Service and certificate, topics…);
#   - Kafka security and reach: each client's TLS and SCRAM settings against
#     the Strimzi listener and its KafkaUser (whose Secret it must mount),
#     the users' ACLs (what each component needs, and the collector never
#     reading or writing decisions), no Kafka credentials in the query
#     service or compaction, and the ports NetworkPolicies open beyond the
#     namespace (the webhook proxy, the control API, the query service; the
#     metrics ports to Prometheus only);
#   - deploy/helm/gpuledger: helm lint --strict and helm template under
#     several value sets, each rendering validated as above, values it must
#     refuse, and the rendering that must equal deploy/k8s;
#   - deploy/prometheus: rule and scrape-config structure, every PromQL
#     expression parsed, every metric known, the relabelling simulated;
#     promtool where it is installed;
#   - deploy/systemd: systemd-analyze verify, plus a structural check;
#   - the webhook's TLS proxy: the openssl recipe, then nginx run in front of
#     a stand-in control API (nginx from PATH, or Debian's package unpacked
#     into the cache, never installed);
#   - every flag and GPULEDGER_* variable, and every value of an option with
#     a fixed set of values, against the built binaries' --help (where they
#     are built).
#
# Usage: tests/deploy/validate.sh
#
# Tools go to ${GPULEDGER_CACHE:-~/.cache/gpuledger}: deploy-venv (Python
# packages from PyPI), deploy-tools (helm, nginx), deploy-crds. A second run
# reuses them. It needs python3 (and python3-venv, installed with apt-get
# when missing) and reaches PyPI, get.helm.sh and GitHub releases; what
# cannot be downloaded is skipped with a message, never passed silently.
#
# Settings (environment):
#   GPULEDGER_CACHE             where tools are kept
#   GPULEDGER_K8S_VERSIONS      Kubernetes schema versions (default "1.30.0 1.37.0")
#   GPULEDGER_CRD_DIR           more folders of CRD YAML files, colon-separated
#   GPULEDGER_NGINX             an nginx binary for the proxy test
#   GPULEDGER_HELM_BASE_URL     a mirror of https://get.helm.sh
#   GPULEDGER_PROMTOOL          a promtool binary (else promtool on PATH)
#   GPULEDGER_BUILD_PROMTOOL=1  build promtool with go when there is none
#                               (once; about ten minutes on two cores)
#   GPULEDGER_BIN_DIR           folder with the built gpuledger-* binaries
#   GPULEDGER_OFFLINE=1         download nothing
#   GPULEDGER_RETRY_DOWNLOADS=1 retry downloads that failed in the last day
#   GPULEDGER_REQUIRE_ALL=1     a skipped check fails the run
#
# Exit status: 0 when every check passed, 1 otherwise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${GPULEDGER_CACHE:-$HOME/.cache/gpuledger}
venv=$cache/deploy-venv
tools=$cache/deploy-tools
crds=$cache/deploy-crds
work=$cache/deploy-work

# Pinned versions. The PyPI packages, and helm and promtool built from their
# Go modules, were checked to install; the get.helm.sh and GitHub release
# URLs below follow each project's published layout.
HELM_VERSION=v4.3.2
KUBERNETES_VALIDATE_VERSION=1.37.0
PYYAML_VERSION=6.0.3
CEL_PYTHON_VERSION=0.5.0
PROMQL_PARSER_VERSION=0.11.0
CERT_MANAGER_VERSION=v1.21.1
STRIMZI_VERSION=1.2.0
PROMETHEUS_OPERATOR_VERSION=v0.93.0
# promtool from the Go module github.com/prometheus/prometheus (opt-in build).
PROMETHEUS_MODULE_VERSION=v0.316.0

python_packages=(
  "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
  "pyyaml==$PYYAML_VERSION"
  "cel-python==$CEL_PYTHON_VERSION"
  "promql-parser==$PROMQL_PARSER_VERSION"
)

say() { printf '== %s\n' "$*" >&2; }

mkdir -p "$cache" "$tools" "$crds" "$work"

# ---- Python and the virtual environment ------------------------------------
need=()
command -v python3 >/dev/null 2>&1 || need+=(python3)
if [ ! -x "$venv/bin/python" ]; then
  probe=$(mktemp -d)
  if ! python3 -m venv "$probe/v" >/dev/null 2>&1; then need+=(python3-venv); fi
  rm -rf "$probe"
fi
if [ ${#need[@]} -gt 0 ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "validate.sh: needs ${need[*]} and there is no apt-get to install them" >&2
    exit 1
  fi
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  say "installing ${need[*]} with apt-get"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi

stamp="$venv/.installed-$(printf '%s ' "${python_packages[@]}" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  say "creating the Python environment in $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${python_packages[@]}"
  touch "$stamp"
fi
py=$venv/bin/python

# ---- downloads ---------------------------------------------------------------
# fetch URL DEST: download with a timeout; remember a failure for a day so a
# machine without the network stays quick on later runs.
fetch() {
  local url=$1 dest=$2 failed
  failed="$tools/.failed-$(printf '%s' "$url" | sha256sum | cut -c1-16)"
  if [ "${GPULEDGER_OFFLINE:-0}" = 1 ]; then return 1; fi
  if [ -f "$failed" ] && [ "${GPULEDGER_RETRY_DOWNLOADS:-0}" != 1 ] \
     && [ -n "$(find "$failed" -mmin -1440 2>/dev/null)" ]; then
    return 1
  fi
  if "$py" - "$url" "$dest" <<'PY'
import os, shutil, sys, urllib.request
url, dest = sys.argv[1:3]
try:
    with urllib.request.urlopen(url, timeout=30) as r, open(dest + ".part", "wb") as f:
        shutil.copyfileobj(r, f)
except Exception as e:  # any failure: report and let the caller skip
    print(f"download failed: {url}: {e}", file=sys.stderr)
    sys.exit(1)
os.replace(dest + ".part", dest)
PY
  then
    rm -f "$failed"
    return 0
  fi
  rm -f "$dest.part"
  touch "$failed"
  return 1
}

# ---- helm ----------------------------------------------------------------------
case "$(uname -m)" in
  x86_64 | amd64) arch=amd64 ;;
  aarch64 | arm64) arch=arm64 ;;
  *) arch=$(uname -m) ;;
esac
helm_dir=$tools/helm-$HELM_VERSION
helm=$helm_dir/helm
if [ ! -x "$helm" ]; then
  mkdir -p "$helm_dir"
  tarball=helm-$HELM_VERSION-linux-$arch.tar.gz
  base=${GPULEDGER_HELM_BASE_URL:-https://get.helm.sh}
  # The tarball and its .sha256, as Helm's own install script fetches them.
  if fetch "$base/$tarball" "$helm_dir/$tarball" \
     && fetch "$base/$tarball.sha256" "$helm_dir/$tarball.sha256"; then
    want=$(cut -d' ' -f1 < "$helm_dir/$tarball.sha256")
    got=$(sha256sum "$helm_dir/$tarball" | cut -d' ' -f1)
    if [ "$want" = "$got" ]; then
      tar -xzf "$helm_dir/$tarball" -C "$helm_dir" --strip-components=1 "linux-$arch/helm"
      say "helm $HELM_VERSION from $base (sha256 verified)"
    else
      say "helm tarball checksum mismatch ($got, want $want): not used"
    fi
    rm -f "$helm_dir/$tarball" "$helm_dir/$tarball.sha256"
  fi
  if [ ! -x "$helm" ] && command -v go >/dev/null 2>&1 && [ "${GPULEDGER_OFFLINE:-0}" != 1 ]; then
    # No release download here: build the same version from its Go module.
    say "building helm $HELM_VERSION from the Go module helm.sh/helm/v4 (one-off, a few minutes)"
    GOBIN=$helm_dir CGO_ENABLED=0 nice -n 10 go install -ldflags '-s -w' "helm.sh/helm/v4/cmd/helm@$HELM_VERSION" >&2 || true
  fi
fi
helm_args=()
if [ -x "$helm" ]; then
  helm_args=(--helm "$helm")
else
  say "no helm: $HELM_VERSION could be neither downloaded nor built with go"
fi

# ---- CRD schemas ---------------------------------------------------------------
crd_args=(--crd-dir "$crds")
get_crds() {
  local name=$1 url=$2
  [ -s "$crds/$name" ] && return 0
  fetch "$url" "$crds/$name" || {
    say "no $name: $url could not be downloaded (tried again after a day, or with GPULEDGER_RETRY_DOWNLOADS=1)"
    return 1
  }
}
# A CRD bundle that cannot be had leaves its kinds checked for structure
# only (check_deploy.py says which).
get_crds "cert-manager-$CERT_MANAGER_VERSION.crds.yaml" \
  "https://github.com/cert-manager/cert-manager/releases/download/$CERT_MANAGER_VERSION/cert-manager.crds.yaml" || true
get_crds "strimzi-crds-$STRIMZI_VERSION.yaml" \
  "https://github.com/strimzi/strimzi-kafka-operator/releases/download/$STRIMZI_VERSION/strimzi-crds-$STRIMZI_VERSION.yaml" || true
get_crds "prometheus-operator-$PROMETHEUS_OPERATOR_VERSION-crds.yaml" \
  "https://github.com/prometheus-operator/prometheus-operator/releases/download/$PROMETHEUS_OPERATOR_VERSION/stripped-down-crds.yaml" || true
if [ -n "${GPULEDGER_CRD_DIR:-}" ]; then
  IFS=: read -r -a extra_crds <<< "$GPULEDGER_CRD_DIR"
  for d in "${extra_crds[@]}"; do crd_args+=(--crd-dir "$d"); done
fi

# ---- nginx (for the webhook proxy test) -----------------------------------------
nginx=${GPULEDGER_NGINX:-}
if [ -z "$nginx" ]; then
  if command -v nginx >/dev/null 2>&1; then
    nginx=$(command -v nginx)
  elif [ -x "$tools/nginx/usr/sbin/nginx" ]; then
    nginx=$tools/nginx/usr/sbin/nginx
  elif [ "${GPULEDGER_OFFLINE:-0}" != 1 ] && command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1; then
    # Debian's nginx, unpacked into the cache (not installed, no service).
    deb_dir=$(mktemp -d)
    for pkg in nginx nginx-core nginx-light; do
      if (cd "$deb_dir" && apt-get download -qq "$pkg" >/dev/null 2>&1); then
        for deb in "$deb_dir"/*.deb; do dpkg-deb -x "$deb" "$tools/nginx"; done
        rm -f "$deb_dir"/*.deb
        [ -x "$tools/nginx/usr/sbin/nginx" ] && break
      fi
    done
    rm -rf "$deb_dir"
    [ -x "$tools/nginx/usr/sbin/nginx" ] && nginx=$tools/nginx/usr/sbin/nginx
  fi
fi
if [ -n "$nginx" ] && ! "$nginx" -v >/dev/null 2>&1; then
  say "$nginx does not run here"
  nginx=""
fi
nginx_args=()
[ -n "$nginx" ] && nginx_args=(--nginx "$nginx")

# ---- the built binaries (for the flag check) --------------------------------------
# Each binary from wherever the newest build of it is; GPULEDGER_BIN_DIR wins.
bin_args=()
for b in gpuledger-collector gpuledger-processor gpuledger-query; do
  found=""
  if [ -n "${GPULEDGER_BIN_DIR:-}" ]; then
    [ -x "$GPULEDGER_BIN_DIR/$b" ] && found=$GPULEDGER_BIN_DIR/$b
  else
    for d in ${CARGO_TARGET_DIR:+"$CARGO_TARGET_DIR/release" "$CARGO_TARGET_DIR/debug"} \
             "$HOME/.cache/gpuledger-target/release" "$HOME/.cache/gpuledger-target/debug" \
             "$root/target/release" "$root/target/debug"; do
      if [ -x "$d/$b" ] && { [ -z "$found" ] || [ "$d/$b" -nt "$found" ]; }; then found=$d/$b; fi
    done
    if [ -z "$found" ] && command -v "$b" >/dev/null 2>&1; then found=$(command -v "$b"); fi
  fi
  [ -n "$found" ] && bin_args+=(--bin "$b=$found")
done

# ---- promtool ----------------------------------------------------------------------
promtool=${GPULEDGER_PROMTOOL:-}
promtool_dir=$tools/promtool-$PROMETHEUS_MODULE_VERSION
if [ -z "$promtool" ]; then
  if command -v promtool >/dev/null 2>&1; then
    promtool=$(command -v promtool)
  elif [ -x "$promtool_dir/promtool" ]; then
    promtool=$promtool_dir/promtool
  elif [ "${GPULEDGER_BUILD_PROMTOOL:-0}" = 1 ] && command -v go >/dev/null 2>&1; then
    say "building promtool from github.com/prometheus/prometheus@$PROMETHEUS_MODULE_VERSION (one-off, long)"
    mkdir -p "$promtool_dir"
    GOBIN=$promtool_dir CGO_ENABLED=0 nice -n 10 go install -ldflags '-s -w' \
      "github.com/prometheus/prometheus/cmd/promtool@$PROMETHEUS_MODULE_VERSION" >&2 || true
    [ -x "$promtool_dir/promtool" ] && promtool=$promtool_dir/promtool
  fi
fi

other_args=()
command -v kubectl >/dev/null 2>&1 && other_args+=(--kubectl "$(command -v kubectl)")
[ -n "$promtool" ] && other_args+=(--promtool "$promtool")
command -v systemd-analyze >/dev/null 2>&1 && other_args+=(--systemd-analyze "$(command -v systemd-analyze)")
[ "${GPULEDGER_REQUIRE_ALL:-0}" = 1 ] && other_args+=(--require-all)

export PYTHONDONTWRITEBYTECODE=1
exec "$py" "$here/check_deploy.py" \
  --root "$root" \
  --work "$work" \
  --k8s-versions "${GPULEDGER_K8S_VERSIONS:-1.30.0 1.37.0}" \
  "${crd_args[@]}" "${helm_args[@]}" "${nginx_args[@]}" "${bin_args[@]}" \
  "${other_args[@]}"
