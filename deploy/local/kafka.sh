#!/usr/bin/env bash
# A real single-node Apache Kafka (KRaft, broker + controller in one JVM) on
# 127.0.0.1 for development, tests and the demo.
#
#   deploy/local/kafka.sh fetch     resolve the broker jars from Maven Central (cached)
#   deploy/local/kafka.sh start     format storage if new, start, wait until metadata answers
#   deploy/local/kafka.sh stop      stop it (and wait until it is gone)
#   deploy/local/kafka.sh status    say whether it runs; exit 0 if it answers
#   deploy/local/kafka.sh topics    create the gpuledger topics (idempotent)
#   deploy/local/kafka.sh prune     delete the topics tests leave behind (e2e-*)
#   deploy/local/kafka.sh drop P    delete the topics whose names start with P
#   deploy/local/kafka.sh reset     stop and delete all data
#   deploy/local/kafka.sh user NAME  add or update SCRAM user NAME (password on stdin)
#   deploy/local/kafka.sh acl ARGS…  run kafka-acls against the broker (ARGS as AclCommand takes them)
#
# Besides PLAINTEXT on the client port, the broker has a SASL_SSL listener
# on port+2: TLS with a certificate from a CA made on first start
# (<data>/tls/ca.crt) and SCRAM-SHA-256/512 logins. The ACL authorizer is
# on: plaintext clients (User:ANONYMOUS) are super users, so tests and the
# demo run as before, while a SASL user may do only what its ACLs allow.
#
# Settings (environment):
#   GPULEDGER_KAFKA_PORT        client port (default 9092); the controller uses port+1,
#                               the SASL_SSL listener port+2
#   GPULEDGER_KAFKA_VERSION     Kafka release (default 4.4.0)
#   GPULEDGER_TOPIC_PREFIX      prefix for topic names (default none)
#   GPULEDGER_LEDGER_PARTITIONS / _TELEMETRY_ / _DECISIONS_ / _DLQ_PARTITIONS
#                               partition counts (defaults 4 / 4 / 4 / 1)
#   GPULEDGER_CACHE             where jars are cached (default ~/.cache/gpuledger)
#   GPULEDGER_KAFKA_DATA        broker data and logs (default <repo>/var/kafka-<port>)
# Starting a broker that already answers is a no-op. A user with their own
# cluster sets GPULEDGER_KAFKA_BOOTSTRAP instead and never runs this script.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
port=${GPULEDGER_KAFKA_PORT:-9092}
controller_port=$((port + 1))
version=${GPULEDGER_KAFKA_VERSION:-4.4.0}
cache=${GPULEDGER_CACHE:-$HOME/.cache/gpuledger}
libs="$cache/kafka-$version/libs"
data=${GPULEDGER_KAFKA_DATA:-$repo/var/kafka-$port}
bootstrap="127.0.0.1:$port"
sasl_port=$((port + 2))
tls="$data/tls"
java_bin=${JAVA:-java}

say() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

fetch() {
  if [ -f "$libs/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || die "mvn is not installed (apt-get install maven)"
  say "resolving org.apache.kafka:kafka_2.13:$version and its dependencies from Maven Central into $libs"
  rm -rf "$libs"; mkdir -p "$libs"
  mvn -q -B -f "$here/pom.xml" -Dkafka.version="$version" \
    dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$libs" \
    || die "mvn could not resolve the Kafka jars (see the output above)"
  touch "$libs/.complete"
}

run_class() {
  local class=$1; shift
  "$java_bin" -Xmx256m -cp "$libs/*" -Dlog4j2.configurationFile="$here/log4j2.properties" \
    -Dkafka.logs.dir="$data/logs" "$class" "$@"
}

answers() {
  # A metadata request through librdkafka: what every client does first.
  command -v kcat >/dev/null || die "kcat is not installed (apt-get install kcat)"
  timeout 10 kcat -b "$bootstrap" -L -m 5 >/dev/null 2>&1
}

pid_of() {
  local pidfile="$data/broker.pid"
  [ -f "$pidfile" ] || return 1
  local pid; pid=$(cat "$pidfile")
  kill -0 "$pid" 2>/dev/null || return 1
  echo "$pid"
}

# A CA and a broker certificate for 127.0.0.1 and localhost, made once.
# Kafka reads the key and chain from one PEM file.
make_certificates() {
  [ -f "$tls/broker.pem" ] && return 0
  command -v openssl >/dev/null || die "openssl is not installed (apt-get install openssl)"
  mkdir -p "$tls"
  say "making a CA and a broker certificate in $tls"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=gpuledger local CA" \
    -keyout "$tls/ca.key" -out "$tls/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
    -keyout "$tls/broker.key" -out "$tls/broker.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' > "$tls/broker.ext"
  openssl x509 -req -in "$tls/broker.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" -CAcreateserial \
    -days 3650 -extfile "$tls/broker.ext" -out "$tls/broker.crt" 2>/dev/null
  openssl pkcs8 -topk8 -nocrypt -in "$tls/broker.key" -out "$tls/broker.pk8"
  cat "$tls/broker.pk8" "$tls/broker.crt" "$tls/ca.crt" > "$tls/broker.pem"
  chmod 600 "$tls"/*.key "$tls"/*.pk8 "$tls/broker.pem"
}

write_config() {
  mkdir -p "$data/logs" "$data/log-dirs"
  make_certificates
  cat > "$data/server.properties" <<CONF
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port,SASL_SSL://127.0.0.1:$sasl_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port,SASL_SSL://127.0.0.1:$sasl_port
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$tls/broker.pem
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:ANONYMOUS
allow.everyone.if.no.acl.found=false
log.dirs=$data/log-dirs
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
log.retention.hours=-1
log.segment.bytes=268435456
CONF
}

start() {
  if answers; then
    say "a broker already answers on $bootstrap"
    if [ -f "$data/server.properties" ] && ! grep -q '^listeners=.*SASL_SSL' "$data/server.properties"; then
      say "it has no SASL_SSL listener; restart it to get one: deploy/local/kafka.sh stop && deploy/local/kafka.sh start"
    fi
    return 0
  fi
  fetch
  command -v "$java_bin" >/dev/null || die "java is not installed (Java 17 or later is needed)"
  if pid=$(pid_of); then
    say "broker process $pid exists but does not answer yet; waiting for it"
  else
    write_config
    if [ ! -f "$data/log-dirs/meta.properties" ]; then
      local cluster_id; cluster_id=$(run_class kafka.tools.StorageTool random-uuid)
      say "formatting KRaft storage in $data (cluster $cluster_id)"
      run_class kafka.tools.StorageTool format -t "$cluster_id" -c "$data/server.properties" >/dev/null
    fi
    say "starting Kafka $version on $bootstrap (logs: $data/logs/server.log)"
    nohup "$java_bin" -Xms256m -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
      -cp "$libs/*" -Dlog4j2.configurationFile="$here/log4j2.properties" \
      -Dkafka.logs.dir="$data/logs" kafka.Kafka "$data/server.properties" \
      > "$data/logs/stdout.log" 2>&1 < /dev/null &
    echo $! > "$data/broker.pid"
  fi
  for _ in $(seq 1 120); do
    if answers; then say "broker answers on $bootstrap"; return 0; fi
    pid_of >/dev/null || { tail -n 30 "$data/logs/stdout.log" "$data/logs/server.log" >&2 2>/dev/null || true; die "the broker exited during start-up"; }
    sleep 1
  done
  die "the broker did not answer metadata requests within 120 s (see $data/logs/server.log)"
}

stop() {
  local pid
  if ! pid=$(pid_of); then say "no broker running from $data"; return 0; fi
  say "stopping broker $pid"
  kill "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || { rm -f "$data/broker.pid"; return 0; }; sleep 1; done
  say "broker $pid did not stop in 60 s; killing it"
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$data/broker.pid"
}

status() {
  if answers; then
    say "a broker answers on $bootstrap$(pid=$(pid_of) && echo " (pid $pid)")"
  else
    say "no broker answers on $bootstrap"; return 1
  fi
}

topics() {
  answers || die "no broker answers on $bootstrap; run: deploy/local/kafka.sh start"
  local prefix=${GPULEDGER_TOPIC_PREFIX:-}
  create() {
    local name=$1 partitions=$2; shift 2
    run_class org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --create --if-not-exists \
      --topic "$prefix$name" --partitions "$partitions" --replication-factor 1 "$@" >/dev/null
    say "topic $prefix$name ($partitions partitions)"
  }
  create gpuledger.telemetry "${GPULEDGER_TELEMETRY_PARTITIONS:-4}" --config compression.type=producer
  create gpuledger.ledger "${GPULEDGER_LEDGER_PARTITIONS:-4}" --config retention.ms=-1
  create gpuledger.decisions "${GPULEDGER_DECISIONS_PARTITIONS:-4}"
  create gpuledger.dlq "${GPULEDGER_DLQ_PARTITIONS:-1}" --config retention.ms=-1
}

# Every Kafka test makes its own topics (`e2e-<test>-<pid>-<n>.gpuledger.*`)
# and the broker keeps them; `make test` prunes them first, so a broker used
# for many runs does not carry thousands of partitions.
prune() {
  delete_prefixed e2e- "test topics"
}

# Deletes every topic whose name starts with $1 (described as $2).
delete_prefixed() {
  local prefix=$1 what=$2 n
  answers || die "no broker answers on $bootstrap; run: deploy/local/kafka.sh start"
  n=$(kcat -b "$bootstrap" -L -m 10 2>/dev/null | grep -cF "  topic \"$prefix" || true)
  if [ "$n" -eq 0 ]; then say "no $what to delete"; return 0; fi
  # TopicCommand takes a regular expression: the prefix's dots are literal.
  run_class org.apache.kafka.tools.TopicCommand --bootstrap-server "$bootstrap" --delete \
    --if-exists --topic "${prefix//./\\.}.*" >/dev/null
  say "deleted $n $what"
}

# Adds or updates a SCRAM user (both mechanisms) with the password read
# from stdin, through the plaintext listener.
user() {
  local name=$1 password
  answers || die "no broker answers on $bootstrap; run: deploy/local/kafka.sh start"
  IFS= read -r password || true
  [ -n "$password" ] || die "give the password of $name on stdin"
  case "$password" in *[],=[]*) die "the password may not contain ',', '=', '[' or ']'" ;; esac
  local mechanism
  for mechanism in SCRAM-SHA-256 SCRAM-SHA-512; do  # one credential per request
    run_class org.apache.kafka.tools.ConfigCommand --bootstrap-server "$bootstrap" --alter \
      --entity-type users --entity-name "$name" \
      --add-config "$mechanism=[iterations=4096,password=$password]" >/dev/null
  done
  say "SCRAM user $name ready on 127.0.0.1:$sasl_port (CA: $tls/ca.crt)"
}

acl() {
  answers || die "no broker answers on $bootstrap; run: deploy/local/kafka.sh start"
  run_class org.apache.kafka.tools.AclCommand --bootstrap-server "$bootstrap" "$@" >/dev/null
}

reset() {
  stop
  rm -rf "$data"
  say "deleted $data"
}

case "${1:-}" in
  fetch) fetch ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  topics) topics ;;
  prune) prune ;;
  drop)
    [ -n "${2:-}" ] || die "usage: deploy/local/kafka.sh drop TOPIC_PREFIX"
    delete_prefixed "$2" "topics named $2*"
    ;;
  reset) reset ;;
  user)
    [ -n "${2:-}" ] || die "usage: deploy/local/kafka.sh user NAME < password"
    user "$2"
    ;;
  acl) shift; acl "$@" ;;
  *) sed -n '2,32p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
