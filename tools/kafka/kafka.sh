#!/usr/bin/env bash
# Real Apache Kafka (KRaft, no Docker) for agentledger's Kafka backend tests.
#
#   tools/kafka/kafka.sh fetch              download the broker jars into tools/kafka/.jars (cached)
#   tools/kafka/kafka.sh start N            N = 1 or 3; new cluster under $KAFKA_BASE, prints bootstrap
#   tools/kafka/kafka.sh wait N [timeout_s] wait until the metadata lists exactly N brokers
#   tools/kafka/kafka.sh stop [--clean]     SIGTERM all nodes, SIGKILL after a grace period
#   tools/kafka/kafka.sh kill NODE          kill -9 one node (1..3)
#   tools/kafka/kafka.sh restart NODE|all [--no-wait]
#                                           start stopped node(s) again (same command, no re-format)
#   tools/kafka/kafka.sh status             which nodes are running (exit 0 all up, 3 some down, 1 none)
#   tools/kafka/kafka.sh bootstrap          print the bootstrap servers string
#   tools/kafka/kafka.sh secure             print the SASL_SSL listener's settings as KEY=VALUE lines:
#                                           SECURE_BOOTSTRAP, TLS_CA (PEM of the CA that signed the
#                                           brokers' certificates), SASL_USER, SASL_PASSWORD_FILE
#   tools/kafka/kafka.sh topics ARGS...     kafka-topics  (TopicCommand) against the cluster
#   tools/kafka/kafka.sh produce TOPIC [ARGS...]   console producer, lines from stdin
#   tools/kafka/kafka.sh consume TOPIC [ARGS...]   console consumer (add --from-beginning --max-messages N)
#
# Environment (all optional):
#   KAFKA_BASE          cluster dir (default: tools/kafka/.run). Use one per test run to avoid collisions.
#   KAFKA_JARS_DIR      jar cache (default: tools/kafka/.jars)
#   KAFKA_HEAP_OPTS     default "-Xms64m -Xmx512m" (per node)
#   KAFKA_JVM_OPTS      default "-XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true"
#   KAFKA_WAIT_TIMEOUT  readiness timeout in seconds for start/restart (default 120)
#   KAFKA_STOP_GRACE    seconds between SIGTERM and SIGKILL in stop (default 20; 0 = kill at once)
#   KAFKA_EXTRA_PROPS   extra server.properties lines appended to every node (newline separated)
#   KAFKA_MVN_ARGS      extra arguments for mvn in fetch (e.g. -Dmaven.repo.local=...)
#
# stdout carries only results (the bootstrap string for start); progress goes to stderr,
# so BOOTSTRAP=$(tools/kafka/kafka.sh start 3) works.
#
# Every node has a PLAINTEXT listener (the bootstrap string) and a SASL_SSL listener: TLS with a
# certificate for 127.0.0.1 signed by a CA made for the cluster (openssl), and SASL with the
# mechanisms SCRAM-SHA-512 and PLAIN for one user, `ledger`, whose random password is kept in a
# file of mode 0600. Brokers and controllers talk to each other over PLAINTEXT.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
POM="$SCRIPT_DIR/pom.xml"
LOG4J_CONF="$SCRIPT_DIR/log4j2.xml"
WAIT_SRC="$SCRIPT_DIR/WaitBrokers.java"
JARS_DIR="${KAFKA_JARS_DIR:-$SCRIPT_DIR/.jars}"
KAFKA_BASE="${KAFKA_BASE:-$SCRIPT_DIR/.run}"
DEP_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms64m -Xmx512m}"
JVM_OPTS="${KAFKA_JVM_OPTS:--XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError -Djava.awt.headless=true}"
WAIT_TIMEOUT="${KAFKA_WAIT_TIMEOUT:-120}"
STOP_GRACE="${KAFKA_STOP_GRACE:-20}"
START_ATTEMPTS=3 # fresh ports are picked again if a port was taken meanwhile

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
die() {
  printf 'kafka.sh: error: %s\n' "$*" >&2
  exit 1
}
now_ms() { date +%s%3N; }
usage() {
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
  exit 2
}

# KAFKA_BASE must be absolute: it ends up in server.properties and in the brokers' command lines.
abs_base() {
  case "$KAFKA_BASE" in
    /*) ;;
    *) KAFKA_BASE="$PWD/$KAFKA_BASE" ;;
  esac
}

# ---------------------------------------------------------------------------- jars

pom_stamp() {
  { sha256sum "$POM" | cut -d' ' -f1; echo "$DEP_PLUGIN"; } | sha256sum | cut -d' ' -f1
}

jars_complete() {
  [[ -f "$JARS_DIR/.stamp" && "$(cat "$JARS_DIR/.stamp")" == "$(pom_stamp)" ]]
}

cmd_fetch() {
  if jars_complete; then
    log "jars up to date in $JARS_DIR"
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found (need Maven 3.6+ and Java 17+ to fetch the broker jars)"
  mkdir -p "$(dirname "$JARS_DIR")"
  # Serialise concurrent fetches. The lock lives in a subshell so its fd is never
  # inherited by a broker started later in the same invocation (that would hold it forever).
  (
    if command -v flock >/dev/null; then
      exec 9>"$JARS_DIR.lock"
      flock 9
    fi
    if jars_complete; then exit 0; fi
    local tmp="$JARS_DIR.tmp.$$" t0
    rm -rf "$tmp"
    t0=$(now_ms)
    log "fetching Kafka jars with Maven into $JARS_DIR (first run: ~66 MB into ~/.m2, 44 MB of jars)"
    # Output is kept only for failures (mvn -q still prints bare ANSI resets on stdout).
    # shellcheck disable=SC2086 # KAFKA_MVN_ARGS is a list of words on purpose
    if ! mvn -B -q -Dstyle.color=never -f "$POM" "$DEP_PLUGIN:copy-dependencies" \
      -DincludeScope=runtime -DoutputDirectory="$tmp" ${KAFKA_MVN_ARGS:-} >"$tmp.mvn.log" 2>&1; then
      sed $'s/\e\\[[0-9;]*m//g' "$tmp.mvn.log" >&2
      rm -rf "$tmp" "$tmp.mvn.log"
      die "mvn copy-dependencies failed"
    fi
    rm -f "$tmp.mvn.log"
    compgen -G "$tmp/kafka_2.13-*.jar" >/dev/null || {
      rm -rf "$tmp"
      die "fetch finished but kafka_2.13 jar is missing in $tmp"
    }
    pom_stamp >"$tmp/.stamp"
    rm -rf "$JARS_DIR"
    mv "$tmp" "$JARS_DIR"
    log "fetched $(find "$JARS_DIR" -name '*.jar' | wc -l) jars ($(du -sh "$JARS_DIR" | cut -f1)) in $(($(now_ms) - t0)) ms"
  )
}

ensure_jars() { jars_complete || cmd_fetch; }

# JAVA_TOOL=(java ...): JVM for a helper/tool, quiet logging into $KAFKA_BASE/<logfile>.
# (An array, not a function: `"${JAVA_TOOL[@]}" ... &` gives $! = the java pid itself.)
java_tool_cmd() {
  JAVA_TOOL=(java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.shutdownHookEnabled=false
    -Dlog4j2.configurationFile="$LOG4J_CONF" -Dkafka.logs.dir="$KAFKA_BASE" -Dkafka.log.file="$1"
    -cp "$JARS_DIR/*")
}

# ---------------------------------------------------------------------------- cluster state

node_dir() { echo "$KAFKA_BASE/node$1"; }

load_env() {
  [[ -f "$KAFKA_BASE/cluster.env" ]] || die "no cluster under $KAFKA_BASE (run: kafka.sh start 1|3)"
  # shellcheck source=/dev/null
  source "$KAFKA_BASE/cluster.env"
}

# Prints the pid if node $1 is running (the pid file's process is a broker of this node).
node_pid() {
  local dir pidf pid cmdline
  dir="$(node_dir "$1")"
  pidf="$dir/pid"
  [[ -f "$pidf" ]] || return 1
  pid="$(cat "$pidf")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  if [[ -r "/proc/$pid/cmdline" ]]; then
    cmdline="$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null)" || return 1
  else
    cmdline="$(ps -o command= -p "$pid" 2>/dev/null)" || return 1
  fi
  [[ "$cmdline" == *"kafka.Kafka $dir/server.properties"* ]] || return 1
  echo "$pid"
}

running_nodes() {
  local i
  for ((i = 1; i <= KAFKA_NODES; i++)); do
    if node_pid "$i" >/dev/null; then echo "$i"; fi
  done
}

show_logs() {
  local i dir f
  for i in "$@"; do
    dir="$(node_dir "$i")"
    for f in console.log broker.log; do
      [[ -s "$dir/$f" ]] || continue
      printf -- '----- node%s/%s (last 30 lines) -----\n' "$i" "$f" >&2
      tail -n 30 "$dir/$f" >&2
    done
  done
}

# ---------------------------------------------------------------------------- start

# N free ports on 127.0.0.1, held open together while picking so they are distinct.
# Preferably below the kernel's ephemeral range so outgoing connections never grab them
# between picking and the broker binding them.
pick_ports() {
  python3 - "$1" <<'PY'
import random, socket, sys
n = int(sys.argv[1])
try:
    lo, _hi = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
except Exception:
    lo = 32768
cands = list(range(20000, min(lo, 32768)))
random.shuffle(cands)
held, ports = [], []
def take(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        return
    held.append(s)
    ports.append(s.getsockname()[1])
for p in cands:
    if len(ports) == n:
        break
    take(p)
while len(ports) < n:
    take(0)
print(" ".join(map(str, ports)))
for s in held:
    s.close()
PY
}

# A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (as StorageTool random-uuid).
new_cluster_id() {
  python3 -c '
import base64, os
while True:
    b = os.urandom(16)
    s = base64.urlsafe_b64encode(b).decode().rstrip("=")
    if not s.startswith("-") and b not in (bytes(16), bytes(15) + b"\x01"):
        print(s)
        break'
}

# The SASL_SSL listener's secrets, under $KAFKA_BASE: a CA and a broker certificate for
# 127.0.0.1/localhost signed by it (tls/), and the password of the SASL user (sasl/).
SASL_USER=ledger
make_secrets() {
  local tls="$KAFKA_BASE/tls" sasl="$KAFKA_BASE/sasl"
  command -v openssl >/dev/null || die "openssl not found (makes the brokers' TLS certificates; Debian package openssl)"
  mkdir -p "$tls" "$sasl"
  chmod 700 "$tls" "$sasl"
  SASL_PASSWORD_FILE="$sasl/$SASL_USER.password"
  (umask 077 && python3 -c 'import secrets; print(secrets.token_urlsafe(24), end="")' >"$SASL_PASSWORD_FILE")
  if ! {
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=agentledger test Kafka CA" \
      -keyout "$tls/ca.key" -out "$tls/ca.pem" &&
      openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
        -keyout "$tls/broker.key" -out "$tls/broker.csr" &&
      printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$tls/broker.ext" &&
      openssl x509 -req -in "$tls/broker.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
        -days 30 -extfile "$tls/broker.ext" -out "$tls/broker.pem" &&
      openssl pkcs8 -topk8 -nocrypt -in "$tls/broker.key" -out "$tls/broker.pk8" &&
      cat "$tls/broker.pk8" "$tls/broker.pem" "$tls/ca.pem" >"$tls/broker-keystore.pem"
  } >"$tls/openssl.log" 2>&1; then
    cat "$tls/openssl.log" >&2
    die "cannot make the brokers' TLS certificates with openssl"
  fi
  chmod 600 "$tls"/*.key "$tls"/*.pk8 "$tls/broker-keystore.pem"
}

write_node_files() { # node_id
  local i="$1" dir rf isr voters="" j
  dir="$(node_dir "$i")"
  mkdir -p "$dir/data"
  if ((KAFKA_NODES == 1)); then rf=1 isr=1; else rf=3 isr=2; fi
  for ((j = 1; j <= KAFKA_NODES; j++)); do
    voters+="${voters:+,}$j@127.0.0.1:${CPORTS[j - 1]}"
  done
  (umask 077 && : >"$dir/server.properties") # it holds the PLAIN password
  cat >"$dir/server.properties" <<EOF
# generated by tools/kafka/kafka.sh start $KAFKA_NODES
process.roles=broker,controller
node.id=$i
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:${PORTS[i - 1]},CONTROLLER://127.0.0.1:${CPORTS[i - 1]},SASL_SSL://127.0.0.1:${SPORTS[i - 1]}
advertised.listeners=PLAINTEXT://127.0.0.1:${PORTS[i - 1]},SASL_SSL://127.0.0.1:${SPORTS[i - 1]}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_${SASL_USER}="$(cat "$SASL_PASSWORD_FILE")";
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$KAFKA_BASE/tls/broker-keystore.pem
log.dirs=$dir/data
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
# fewer internal partitions: the first consumer group / transaction comes up faster
offsets.topic.num.partitions=10
transaction.state.log.num.partitions=10
share.coordinator.state.topic.num.partitions=10
group.initial.rebalance.delay.ms=0
# KIP-848 consumer groups (agentledger's default group protocol): a silent
# member's partitions move after 10 s, as the classic protocol's client
# setting had them, instead of the broker default of 45 s.
group.consumer.min.session.timeout.ms=6000
group.consumer.session.timeout.ms=10000
group.consumer.min.heartbeat.interval.ms=500
group.consumer.heartbeat.interval.ms=1000
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
EOF
  if [[ -n "${KAFKA_EXTRA_PROPS:-}" ]]; then
    printf '# KAFKA_EXTRA_PROPS\n%s\n' "$KAFKA_EXTRA_PROPS" >>"$dir/server.properties"
  fi
  # The exact command used by start and restart. It records its own pid, then execs java.
  {
    echo '#!/usr/bin/env bash'
    echo "# node $i of $KAFKA_NODES; started by tools/kafka/kafka.sh (start/restart)"
    printf 'echo $$ >%q\n' "$dir/pid"
    printf 'exec java %s %s' "$HEAP_OPTS" "$JVM_OPTS"
    printf ' %q' "-Dlog4j2.configurationFile=$LOG4J_CONF" -Dlog4j2.shutdownHookEnabled=false "-Dkafka.logs.dir=$dir" \
      -cp "$JARS_DIR/*" kafka.Kafka "$dir/server.properties"
    echo
  } >"$dir/run.sh"
  chmod +x "$dir/run.sh"
}

format_node() { # node_id
  local dir
  dir="$(node_dir "$1")"
  java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$LOG4J_CONF" -Dkafka.logs.dir="$dir" -Dkafka.log.file=format.log \
    -cp "$JARS_DIR/*" kafka.tools.StorageTool format \
    -t "$CLUSTER_ID" -c "$dir/server.properties" --ignore-formatted \
    --add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$(cat "$SASL_PASSWORD_FILE")]" >>"$dir/format.log" 2>&1
}

launch_node() { # node_id
  local i="$1" dir k
  dir="$(node_dir "$i")"
  rm -f "$dir/pid"
  printf '===== %s launch\n' "$(date -Is)" >>"$dir/console.log"
  # Detached (own session, no inherited stdio/fds) so $(kafka.sh start) returns and
  # the caller's Ctrl-C does not reach the brokers. Stop them with `kafka.sh stop`.
  (
    cd "$dir"
    if command -v setsid >/dev/null; then
      exec setsid nohup bash "$dir/run.sh" </dev/null >>"$dir/console.log" 2>&1 9>&-
    else
      exec nohup bash "$dir/run.sh" </dev/null >>"$dir/console.log" 2>&1 9>&-
    fi
  ) &
  # run.sh writes its pid, then execs java: wait until that pid is the broker's JVM.
  for ((k = 0; k < 200; k++)); do
    node_pid "$i" >/dev/null && return 0
    if [[ -s "$dir/pid" ]] && ! kill -0 "$(cat "$dir/pid")" 2>/dev/null; then break; fi
    sleep 0.05
  done
  show_logs "$i"
  die "node $i did not start (no broker process for $dir/pid)"
}

# Waits until the metadata lists exactly $2 brokers. While waiting, fails fast if one of the
# nodes in $4.. (the ones just launched) exits. Returns 0 ready, 1 timeout, 4 node died.
wait_ready() { # bootstrap want timeout [watched nodes...]
  local bootstrap="$1" want="$2" timeout="$3" out wpid rc=0 i
  shift 3
  out="$(mktemp "${TMPDIR:-/tmp}/kafka-wait.XXXXXX")"
  java_tool_cmd wait.log
  "${JAVA_TOOL[@]}" "$WAIT_SRC" "$bootstrap" "$want" "$timeout" >"$out" 2>&1 &
  wpid=$!
  WAITER_PID=$wpid
  while kill -0 "$wpid" 2>/dev/null; do
    for i in "$@"; do
      if ! node_pid "$i" >/dev/null; then
        kill "$wpid" 2>/dev/null || true
        wait "$wpid" 2>/dev/null || true
        log "node $i exited while waiting for $want brokers"
        rm -f "$out"
        return 4
      fi
    done
    sleep 0.3
  done
  wait "$wpid" || rc=$?
  WAITER_PID=""
  if ((rc == 0)); then
    log "$(tail -n 1 "$out")"
  else
    sed 's/^/kafka.sh: wait: /' "$out" >&2
  fi
  rm -f "$out"
  return "$rc"
}

stop_nodes() { # grace nodes...
  local grace="$1" i pid deadline left
  shift
  local -a pids=()
  for i in "$@"; do
    if pid="$(node_pid "$i")"; then
      kill -TERM "$pid" 2>/dev/null || true
      pids+=("$i:$pid")
    fi
  done
  ((${#pids[@]})) || return 0
  deadline=$(($(date +%s) + grace))
  while :; do
    left=0
    for i in "$@"; do
      if node_pid "$i" >/dev/null; then left=$((left + 1)); fi
    done
    ((left == 0)) && break
    if (($(date +%s) >= deadline)); then
      log "$left node(s) still running after ${grace}s: SIGKILL"
      for i in "$@"; do
        if pid="$(node_pid "$i")"; then kill -KILL "$pid" 2>/dev/null || true; fi
      done
      sleep 0.5
      deadline=$(($(date +%s) + 10))
      grace=10
    fi
    sleep 0.2
  done
  for i in "$@"; do rm -f "$(node_dir "$i")/pid"; done
}

cleanup_files() {
  rm -rf "$KAFKA_BASE"/node[0-9]*
  rm -rf "$KAFKA_BASE/tls" "$KAFKA_BASE/sasl"
  rm -f "$KAFKA_BASE/cluster.env" "$KAFKA_BASE/bootstrap" "$KAFKA_BASE"/*.log
  rmdir "$KAFKA_BASE" 2>/dev/null || true
}

WAITER_PID=""
on_abort() { # nodes...
  log "interrupted: stopping nodes $*"
  if [[ -n "$WAITER_PID" ]]; then kill "$WAITER_PID" 2>/dev/null || true; fi
  stop_nodes 5 "$@"
  exit 130
}

cmd_start() {
  local n="${1:-}" attempt t0 t1 rc i all=()
  [[ "$n" == 1 || "$n" == 3 ]] || die "usage: kafka.sh start 1|3"
  command -v java >/dev/null || die "java not found (need Java 17+)"
  command -v python3 >/dev/null || die "python3 not found (used to pick free ports)"
  abs_base
  if [[ -f "$KAFKA_BASE/cluster.env" ]]; then
    (
      load_env
      r="$(running_nodes | tr '\n' ' ')"
      [[ -z "$r" ]] || die "nodes $r already running under $KAFKA_BASE (kafka.sh stop first)"
    )
  fi
  ensure_jars
  mkdir -p "$KAFKA_BASE"
  for ((i = 1; i <= n; i++)); do all+=("$i"); done
  KAFKA_NODES="$n"
  trap 'on_abort "${all[@]}"' INT TERM
  for ((attempt = 1; attempt <= START_ATTEMPTS; attempt++)); do
    t0=$(now_ms)
    cleanup_files
    mkdir -p "$KAFKA_BASE"
    local ports
    read -r -a ports <<<"$(pick_ports $((3 * n)))"
    PORTS=("${ports[@]:0:n}")
    CPORTS=("${ports[@]:n:n}")
    SPORTS=("${ports[@]:2*n:n}")
    CLUSTER_ID="$(new_cluster_id)"
    BOOTSTRAP=""
    SECURE_BOOTSTRAP=""
    for ((i = 0; i < n; i++)); do
      BOOTSTRAP+="${BOOTSTRAP:+,}127.0.0.1:${PORTS[i]}"
      SECURE_BOOTSTRAP+="${SECURE_BOOTSTRAP:+,}127.0.0.1:${SPORTS[i]}"
    done
    make_secrets
    {
      echo "KAFKA_NODES=$n"
      echo "CLUSTER_ID=$CLUSTER_ID"
      echo "PORTS=(${PORTS[*]})"
      echo "CPORTS=(${CPORTS[*]})"
      echo "SPORTS=(${SPORTS[*]})"
      echo "BOOTSTRAP=$BOOTSTRAP"
      echo "SECURE_BOOTSTRAP=$SECURE_BOOTSTRAP"
      echo "SASL_PASSWORD_FILE=$SASL_PASSWORD_FILE"
    } >"$KAFKA_BASE/cluster.env"
    for i in "${all[@]}"; do write_node_files "$i"; done
    log "formatting $n node(s), cluster id $CLUSTER_ID"
    local fpids=() fail=0
    for i in "${all[@]}"; do
      format_node "$i" &
      fpids+=($!)
    done
    for i in "${fpids[@]}"; do wait "$i" || fail=1; done
    if ((fail)); then
      for i in "${all[@]}"; do tail -n 20 "$(node_dir "$i")/format.log" >&2; done
      die "kafka.tools.StorageTool format failed"
    fi
    t1=$(now_ms)
    log "starting $n node(s): client ports ${PORTS[*]}, SASL_SSL ports ${SPORTS[*]}, controller ports ${CPORTS[*]} (base $KAFKA_BASE)"
    for i in "${all[@]}"; do launch_node "$i"; done
    rc=0
    wait_ready "$BOOTSTRAP" "$n" "$WAIT_TIMEOUT" "${all[@]}" || rc=$?
    if ((rc == 0)); then
      trap - INT TERM
      echo "$BOOTSTRAP" >"$KAFKA_BASE/bootstrap"
      log "$n node(s) ready in $(($(now_ms) - t0)) ms (format $((t1 - t0)) ms, launch-to-ready $(($(now_ms) - t1)) ms)"
      echo "$BOOTSTRAP"
      return 0
    fi
    stop_nodes 5 "${all[@]}"
    if grep -qs -e 'Address already in use' -e 'BindException' \
      "$KAFKA_BASE"/node*/console.log "$KAFKA_BASE"/node*/broker.log && ((attempt < START_ATTEMPTS)); then
      log "a port was taken meanwhile; retrying with new ports (attempt $((attempt + 1))/$START_ATTEMPTS)"
      continue
    fi
    show_logs "${all[@]}"
    if ((rc == 1)); then
      die "cluster did not list $n brokers within ${WAIT_TIMEOUT}s (nodes stopped; files kept in $KAFKA_BASE)"
    fi
    die "a node exited during startup (nodes stopped; files kept in $KAFKA_BASE)"
  done
}

# ---------------------------------------------------------------------------- other commands

cmd_wait() {
  local n="${1:-}" timeout="${2:-$WAIT_TIMEOUT}" rc=0
  [[ "$n" =~ ^[0-9]+$ ]] || die "usage: kafka.sh wait N [timeout_s]"
  abs_base
  load_env
  ensure_jars
  wait_ready "$BOOTSTRAP" "$n" "$timeout" || rc=$?
  ((rc == 0)) || die "metadata did not list $n brokers within ${timeout}s"
}

cmd_stop() {
  local clean=0 i all=()
  [[ "${1:-}" == "--clean" ]] && clean=1
  abs_base
  if [[ ! -f "$KAFKA_BASE/cluster.env" ]]; then
    log "no cluster under $KAFKA_BASE"
    ((clean)) && cleanup_files
    return 0
  fi
  load_env
  for ((i = 1; i <= KAFKA_NODES; i++)); do all+=("$i"); done
  local t0
  t0=$(now_ms)
  stop_nodes "$STOP_GRACE" "${all[@]}"
  log "stopped ($(($(now_ms) - t0)) ms)"
  if ((clean)); then
    cleanup_files
    log "removed cluster files under $KAFKA_BASE"
  fi
}

check_node_arg() {
  if [[ ! "${1:-}" =~ ^[0-9]+$ ]] || (($1 < 1 || $1 > KAFKA_NODES)); then
    die "node must be 1..$KAFKA_NODES (got '${1:-}')"
  fi
}

cmd_kill() {
  local i="${1:-}" pid k
  abs_base
  load_env
  check_node_arg "$i"
  pid="$(node_pid "$i")" || die "node $i is not running"
  kill -KILL "$pid"
  for ((k = 0; k < 100; k++)); do
    node_pid "$i" >/dev/null || break
    sleep 0.05
  done
  rm -f "$(node_dir "$i")/pid"
  log "node $i (pid $pid) killed with SIGKILL"
}

cmd_restart() {
  local what="${1:-}" nowait=0 i t0 rc=0 targets=() up bootstrap=""
  [[ "${2:-}" == "--no-wait" ]] && nowait=1
  abs_base
  load_env
  ensure_jars
  if [[ "$what" == all ]]; then
    for ((i = 1; i <= KAFKA_NODES; i++)); do
      node_pid "$i" >/dev/null || targets+=("$i")
    done
    ((${#targets[@]})) || {
      log "all nodes already running"
      return 0
    }
  else
    check_node_arg "$what"
    if node_pid "$what" >/dev/null; then die "node $what is already running"; fi
    targets=("$what")
  fi
  t0=$(now_ms)
  for i in "${targets[@]}"; do launch_node "$i"; done
  log "restarted node(s) ${targets[*]}"
  ((nowait)) && return 0
  # Bootstrap only through the restarted node(s): the answer then proves they serve requests,
  # not just that the controller has not fenced the old incarnation yet.
  for i in "${targets[@]}"; do bootstrap+="${bootstrap:+,}127.0.0.1:${PORTS[i - 1]}"; done
  up="$(running_nodes | wc -l)"
  wait_ready "$bootstrap" "$up" "$WAIT_TIMEOUT" "${targets[@]}" || rc=$?
  if ((rc != 0)); then
    show_logs "${targets[@]}"
    die "restarted node(s) ${targets[*]} not ready (metadata did not list $up brokers)"
  fi
  log "node(s) ${targets[*]} back in $(($(now_ms) - t0)) ms"
}

cmd_status() {
  local i pid up=0
  abs_base
  if [[ ! -f "$KAFKA_BASE/cluster.env" ]]; then
    echo "no cluster under $KAFKA_BASE"
    return 1
  fi
  load_env
  for ((i = 1; i <= KAFKA_NODES; i++)); do
    if pid="$(node_pid "$i")"; then
      echo "node$i running pid=$pid port=${PORTS[i - 1]} controller_port=${CPORTS[i - 1]}"
      up=$((up + 1))
    else
      echo "node$i stopped port=${PORTS[i - 1]} controller_port=${CPORTS[i - 1]}"
    fi
  done
  echo "bootstrap=$BOOTSTRAP"
  ((up == KAFKA_NODES)) && return 0
  ((up == 0)) && return 1
  return 3
}

cmd_tool() { # class args...
  abs_base
  load_env
  ensure_jars
  java_tool_cmd tools.log
  exec "${JAVA_TOOL[@]}" "$@" # exec: signals (timeout, Ctrl-C) reach the JVM itself
}

main() {
  local cmd="${1:-}"
  [[ $# -gt 0 ]] && shift
  case "$cmd" in
    fetch) cmd_fetch ;;
    start) cmd_start "$@" ;;
    wait) cmd_wait "$@" ;;
    stop) cmd_stop "$@" ;;
    kill) cmd_kill "$@" ;;
    restart) cmd_restart "$@" ;;
    status) cmd_status ;;
    bootstrap)
      abs_base
      load_env
      echo "$BOOTSTRAP"
      ;;
    secure)
      abs_base
      load_env
      printf 'SECURE_BOOTSTRAP=%s\nTLS_CA=%s\nSASL_USER=%s\nSASL_PASSWORD_FILE=%s\n' \
        "$SECURE_BOOTSTRAP" "$KAFKA_BASE/tls/ca.pem" "$SASL_USER" "$SASL_PASSWORD_FILE"
      ;;
    topics) abs_base && load_env && cmd_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" "$@" ;;
    produce)
      [[ $# -ge 1 ]] || die "usage: kafka.sh produce TOPIC [ARGS...]"
      local t="$1"
      shift
      abs_base && load_env && cmd_tool org.apache.kafka.tools.ConsoleProducer --bootstrap-server "$BOOTSTRAP" --topic "$t" "$@"
      ;;
    consume)
      [[ $# -ge 1 ]] || die "usage: kafka.sh consume TOPIC [ARGS...]"
      local t="$1"
      shift
      abs_base && load_env && cmd_tool org.apache.kafka.tools.consumer.ConsoleConsumer --bootstrap-server "$BOOTSTRAP" --topic "$t" "$@"
      ;;
    -h | --help | help | "") usage ;;
    *)
      log "unknown command: $cmd"
      usage
      ;;
  esac
}

main "$@"
