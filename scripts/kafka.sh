# Sourced by scripts/test.sh and bench/ingest.sh: an Apache Kafka broker (3.9.1,
# KRaft, one node) from Maven Central jars on loopback ports, for the
# record-stream tests. `kafka_start WORK` resolves the classpath of
# tests/kafka/pom.xml (jars cached in ~/.m2), formats a log directory under WORK,
# starts the broker and exports KAFKA_BOOTSTRAP, KAFKA_CP and kafka_pid;
# `kafka_stop` stops it. `kafka_class CLASS ARGS…` runs a Kafka tool class.

kafka_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

kafka_class() {
  java -Xmx512m -cp "$KAFKA_CP" "$@"
}

kafka_start() {
  local work=$1 repo
  repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  mkdir -p "$work/kafka"
  echo "==> resolving the Kafka broker's jars (Maven Central, cached in ~/.m2)"
  (cd "$repo/tests/kafka" && mvn -q dependency:build-classpath -Dmdep.outputFile="$work/kafka/cp.txt" >/dev/null)
  KAFKA_CP=$(cat "$work/kafka/cp.txt")
  export KAFKA_CP
  local port controller
  port=$(kafka_free_port)
  controller=$(kafka_free_port)
  cat >"$work/kafka/server.properties" <<PROPS
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller
advertised.listeners=PLAINTEXT://127.0.0.1:$port
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$work/kafka/logs
num.partitions=4
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
PROPS
  local cluster
  cluster=$(kafka_class kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1)
  kafka_class kafka.tools.StorageTool format -t "$cluster" -c "$work/kafka/server.properties" >/dev/null 2>&1
  cat >"$work/kafka/log4j.properties" <<PROPS
log4j.rootLogger=WARN, file
log4j.logger.kafka.server.KafkaRaftServer=INFO
log4j.appender.file=org.apache.log4j.FileAppender
log4j.appender.file.File=$work/kafka/broker.log
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
PROPS
  java -Xmx768m -Dlog4j.configuration="file:$work/kafka/log4j.properties" -cp "$KAFKA_CP" \
    kafka.Kafka "$work/kafka/server.properties" >"$work/kafka/stdout.log" 2>&1 &
  kafka_pid=$!
  local _
  for _ in $(seq 1 120); do
    if grep -q "Kafka Server started" "$work/kafka/broker.log" 2>/dev/null; then break; fi
    if ! kill -0 "$kafka_pid" 2>/dev/null; then tail -30 "$work/kafka/broker.log" "$work/kafka/stdout.log"; echo "Kafka did not start" >&2; return 1; fi
    sleep 0.5
  done
  grep -q "Kafka Server started" "$work/kafka/broker.log" || { tail -30 "$work/kafka/broker.log"; echo "Kafka did not start in 60 s" >&2; return 1; }
  KAFKA_BOOTSTRAP="127.0.0.1:$port"
  export KAFKA_BOOTSTRAP
  echo "==> Kafka on $KAFKA_BOOTSTRAP"
}

kafka_stop() {
  if [ -n "${kafka_pid:-}" ]; then
    kill "$kafka_pid" 2>/dev/null || true
    wait "$kafka_pid" 2>/dev/null || true
  fi
}
