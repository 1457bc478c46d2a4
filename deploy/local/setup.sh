#!/usr/bin/env bash
# Installs what building, testing and the demo need on a fresh Debian
# machine, skipping whatever is already there:
#   - system packages: cmake, libcurl4-openssl-dev, libssl-dev and
#     pkg-config (librdkafka's cmake build, with TLS and SASL/SCRAM), openssl
#     (certificates for the TLS tests), kcat (a Kafka client for checks),
#     psql (the PostgreSQL wire protocol's client), maven and a Java 17+
#     runtime (the local broker), python3-venv;
#   - a Python environment with confluent-kafka and fastavro (wire-format
#     interop tests), duckdb and pyarrow (reading the Parquet history as
#     other engines do), psycopg (the PostgreSQL wire protocol from
#     Python) and moto's server (an S3 endpoint for the object-store
#     history test) in ~/.cache/gpuledger/venv;
#   - the Kafka broker jars (deploy/local/kafka.sh fetch).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${GPULEDGER_CACHE:-$HOME/.cache/gpuledger}
venv=$cache/venv

say() { printf 'setup: %s\n' "$*" >&2; }

missing=()
need_pkg() { dpkg -s "$1" >/dev/null 2>&1 || missing+=("$1"); }
need_pkg cmake
need_pkg libcurl4-openssl-dev
need_pkg libssl-dev
need_pkg pkg-config
need_pkg openssl
need_pkg kcat
need_pkg curl
need_pkg python3-venv
command -v psql >/dev/null || missing+=(postgresql-client)
command -v mvn >/dev/null || missing+=(maven)
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v cc >/dev/null || missing+=(build-essential)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  say "installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null || { say "cargo is missing: install Rust 1.94 or later (https://rustup.rs)"; exit 1; }

python_packages=(confluent-kafka==2.16.1 fastavro==1.13.1 duckdb==2.0.1 pyarrow==26.0.1 'psycopg[binary]==3.3.9' 'moto[server]==5.2.5')
stamp="$venv/.installed-$(printf '%s ' "${python_packages[@]}" | md5sum | cut -c1-12)"
if [ ! -f "$stamp" ]; then
  say "creating the Python environment in $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${python_packages[@]}"
  touch "$stamp"
fi

"$here/kafka.sh" fetch
say "ready"
