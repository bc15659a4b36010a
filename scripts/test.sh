#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs MinIO when it is missing, starts
# it on a free loopback port with a temporary directory, runs cargo fmt --check,
# clippy with warnings denied and every test of the workspace with the S3 tests
# enabled (they fail rather than skip when MinIO is not there), then stops MinIO.
# It also installs the tus clients (tus-js-client, tuspy) the end-to-end tests run,
# and starts an Apache Kafka broker (KRaft, jars from Maven Central, scripts/kafka.sh)
# for the record-stream tests, Azurite (npm) for the Azure Blob store's tests,
# fake-gcs-server (go install, pinned) for the GCS store's tests, and installs
# haproxy and promtool for the deploy/ checks.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$(go env GOPATH)/bin:$HOME/.cargo/bin:$PATH"
if ! command -v minio >/dev/null 2>&1; then
  echo "==> installing MinIO (go install, about 2-3 minutes)"
  go install github.com/minio/minio@latest
fi
# The GCS emulator, pinned: its behaviour is what the GCS tests were checked on.
fake_gcs_version=v1.56.1
if ! go version -m "$(go env GOPATH)/bin/fake-gcs-server" 2>/dev/null | grep -q "fake-gcs-server[[:space:]]*$fake_gcs_version"; then
  echo "==> installing fake-gcs-server $fake_gcs_version (go install, about a minute)"
  go install "github.com/fsouza/fake-gcs-server@$fake_gcs_version"
fi

# The clients the end-to-end tests drive: tus-js-client and playwright-core (npm)
# next to their scripts, tuspy in a virtualenv under target/, and Chromium (apt)
# for the headless check of the HTML report.
if ! command -v chromium >/dev/null 2>&1; then
  echo "==> installing Chromium (apt-get)"
  sudo_if_needed=""; [ "$(id -u)" -eq 0 ] || sudo_if_needed="sudo"
  $sudo_if_needed apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq chromium >/dev/null
fi
export SLUICE_TEST_CHROMIUM="$(command -v chromium)"
if ! command -v mvn >/dev/null 2>&1 || ! command -v java >/dev/null 2>&1; then
  echo "==> installing Java and Maven (apt-get) for the Kafka broker"
  sudo_if_needed=""; [ "$(id -u)" -eq 0 ] || sudo_if_needed="sudo"
  $sudo_if_needed apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq default-jre-headless maven >/dev/null
fi
# haproxy runs deploy/haproxy.cfg in front of three gateways; promtool (Debian's
# prometheus package) checks deploy/prometheus-rules.yml.
if [ ! -x /usr/sbin/haproxy ] || ! command -v promtool >/dev/null 2>&1; then
  echo "==> installing haproxy and promtool (apt-get)"
  sudo_if_needed=""; [ "$(id -u)" -eq 0 ] || sudo_if_needed="sudo"
  $sudo_if_needed apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo_if_needed apt-get install -y -qq --no-install-recommends \
    haproxy prometheus >/dev/null
fi
export SLUICE_TEST_HAPROXY=/usr/sbin/haproxy
export SLUICE_TEST_PROMTOOL="$(command -v promtool)"
echo "==> installing the test clients (npm, pip)"
npm install --prefix tests/clients --no-audit --no-fund --loglevel=error >/dev/null
npm install --prefix tests/clients/uppy6 --no-audit --no-fund --loglevel=error >/dev/null
if [ ! -x target/test-clients/venv/bin/python ]; then
  python3 -m venv target/test-clients/venv
fi
target/test-clients/venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/clients/requirements.txt
export SLUICE_TEST_CLIENTS="$PWD/tests/clients" SLUICE_TEST_PYTHON="$PWD/target/test-clients/venv/bin/python"
# Spark for Iceberg in a venv of its own: Iceberg's Spark runtime is built
# for Spark 4.1 (none for 4.2, which delta-spark 4.4 above wants).
if [ ! -x target/test-clients/spark-iceberg/bin/python ]; then
  python3 -m venv target/test-clients/spark-iceberg
fi
target/test-clients/spark-iceberg/bin/python -m pip install --quiet --disable-pip-version-check -r tests/clients/requirements-spark-iceberg.txt
export SLUICE_TEST_SPARK_ICEBERG_PYTHON="$PWD/target/test-clients/spark-iceberg/bin/python"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
work=$(mktemp -d -t sluice-test.XXXXXX)
port=$(free_port)
console=$(free_port)
export MINIO_ROOT_USER=sluice-test MINIO_ROOT_PASSWORD=sluice-test-secret
# A KMS key of MinIO's own, so that server-side encryption (--sse) can be tried.
MINIO_KMS_SECRET_KEY="sluice-test-key:$(head -c 32 /dev/urandom | base64)" \
  minio server "$work/data" --address "127.0.0.1:$port" --console-address "127.0.0.1:$console" --quiet \
  >"$work/minio.log" 2>&1 &
minio_pid=$!
# Azurite, the Azure Blob emulator (npm, installed with the test clients
# above), in memory on a loopback port of its own.
azurite_port=$(free_port)
tests/clients/node_modules/.bin/azurite-blob --blobHost 127.0.0.1 --blobPort "$azurite_port" \
  --inMemoryPersistence --skipApiVersionCheck --silent >"$work/azurite.log" 2>&1 &
azurite_pid=$!
# fake-gcs-server, the GCS emulator, in memory; -public-host lets path-style
# XML requests (deltalake's listing) reach it too.
gcs_port=$(free_port)
fake-gcs-server -scheme http -host 127.0.0.1 -port "$gcs_port" -backend memory \
  -external-url "http://127.0.0.1:$gcs_port" -public-host "127.0.0.1:$gcs_port" -log-level error \
  >"$work/fake-gcs.log" 2>&1 &
gcs_pid=$!
source scripts/kafka.sh
cleanup() {
  kafka_stop
  kill "$minio_pid" "$azurite_pid" "$gcs_pid" 2>/dev/null || true
  wait "$minio_pid" "$azurite_pid" "$gcs_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

for _ in $(seq 1 120); do
  if curl -fsS "http://127.0.0.1:$port/minio/health/live" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$minio_pid" 2>/dev/null; then cat "$work/minio.log"; echo "MinIO did not start" >&2; exit 1; fi
  sleep 0.5
done
curl -fsS "http://127.0.0.1:$port/minio/health/live" >/dev/null || { cat "$work/minio.log"; exit 1; }
echo "==> MinIO on 127.0.0.1:$port"
for _ in $(seq 1 60); do
  if curl -sS -o /dev/null "http://127.0.0.1:$azurite_port/devstoreaccount1?comp=list" 2>/dev/null; then break; fi
  if ! kill -0 "$azurite_pid" 2>/dev/null; then cat "$work/azurite.log"; echo "Azurite did not start" >&2; exit 1; fi
  sleep 0.5
done
echo "==> Azurite on 127.0.0.1:$azurite_port"
export SLUICE_TEST_AZURE_BLOB_ENDPOINT="http://127.0.0.1:$azurite_port/devstoreaccount1"
export SLUICE_TEST_AZURE_REQUIRED=1
unset AZURE_STORAGE_CONNECTION_STRING AZURE_STORAGE_ACCOUNT AZURE_STORAGE_KEY AZURE_STORAGE_SAS_TOKEN 2>/dev/null || true
for _ in $(seq 1 60); do
  if curl -fsS -o /dev/null "http://127.0.0.1:$gcs_port/storage/v1/b" 2>/dev/null; then break; fi
  if ! kill -0 "$gcs_pid" 2>/dev/null; then cat "$work/fake-gcs.log"; echo "fake-gcs-server did not start" >&2; exit 1; fi
  sleep 0.5
done
echo "==> fake-gcs-server on 127.0.0.1:$gcs_port"
export SLUICE_TEST_GCS_ENDPOINT="http://127.0.0.1:$gcs_port" SLUICE_TEST_GCS_REQUIRED=1
unset GOOGLE_APPLICATION_CREDENTIALS STORAGE_EMULATOR_HOST GOOGLE_CLOUD_PROJECT 2>/dev/null || true
kafka_start "$work"
echo "==> resolving the Iceberg REST Compatibility Kit's jars (Maven Central, cached in ~/.m2)"
(cd tests/rck && mvn -q dependency:build-classpath -Dmdep.outputFile="$work/rck-classpath.txt" >/dev/null)
export SLUICE_TEST_RCK_CLASSPATH="$work/rck-classpath.txt"

# Tests use exactly this MinIO and nothing of the machine's AWS setup.
export SLUICE_TEST_S3_ENDPOINT="http://127.0.0.1:$port"
export SLUICE_TEST_S3_REQUIRED=1 SLUICE_TEST_KMS_KEY=sluice-test-key
export AWS_ACCESS_KEY_ID="$MINIO_ROOT_USER" AWS_SECRET_ACCESS_KEY="$MINIO_ROOT_PASSWORD" AWS_REGION=us-east-1
export AWS_EC2_METADATA_DISABLED=true AWS_CONFIG_FILE="$work/none" AWS_SHARED_CREDENTIALS_FILE="$work/none"
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL SLUICE_ENDPOINT 2>/dev/null || true

echo "==> cargo fmt --check"
cargo fmt --all -- --check
echo "==> cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
# The README's first command builds sluice-cli alone, with only the features
# it asks for itself (the workspace build unifies them with the tests').
echo "==> cargo check -p sluice-cli (as the README's first command builds it)"
cargo check -p sluice-cli --quiet
# Two test binaries at a time (scripts/run-tests.py): most of their time is
# spent waiting on the stores, brokers and browsers they drive, and one after
# another they took half an hour.
echo "==> cargo test (test binaries two at a time)"
python3 scripts/run-tests.py --jobs "${SLUICE_TEST_JOBS:-2}"
echo "==> fuzzing (bounded: 20 s per target)"
scripts/fuzz.sh 20
echo "==> all tests passed"
