#!/usr/bin/env bash
# The Apache Iceberg REST Compatibility Kit (iceberg-open-api 1.10.1's
# RESTCompatibilityKitCatalogTests, run with the JUnit console launcher)
# against `sluice serve`.
#
# usage: scripts/rck.sh SLUICE_BINARY CLASSPATH_FILE REPORT_DIR
#
# The kit creates tables at fixed locations under `file:/tmp` (CatalogTests'
# BASE_TABLE_LOCATION), so the gateway's store must be `/tmp` itself: the kit
# and the gateway run in a private mount namespace with a fresh tmpfs on
# /tmp (unshare, as root), which disappears with them. What they need from
# outside (the binary, the jars' classpath) is staged under /var/tmp first,
# since anything under /tmp is out of sight in there. The kit's report and
# the gateway's log end in REPORT_DIR; the summary is printed.
# CLASSPATH_FILE is tests/rck/pom.xml's classpath (scripts/test.sh resolves it).
set -euo pipefail
if [ "${1:-}" = --inside ]; then
  stage=$2
  mount -t tmpfs tmpfs /tmp
  mkdir -p /tmp/java
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$stage/sluice" serve --listen "127.0.0.1:$port" --store /tmp >"$stage/serve.log" 2>&1 &
  gateway=$!
  trap 'kill $gateway 2>/dev/null || true' EXIT
  for _ in $(seq 1 100); do
    if curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; then break; fi
    sleep 0.1
  done
  cd /
  # The kit's switches for what this catalog is: namespaces are created
  # before their tables (as Polaris and most REST catalogs have it), and
  # names may hold dots.
  CATALOG_URI="http://127.0.0.1:$port/iceberg" \
  CATALOG_RCK_REQUIRES__NAMESPACE__CREATE=true \
  CATALOG_RCK_SUPPORTS__NAMES__WITH__DOT=true \
    timeout 600 java -Xmx1g -Djava.io.tmpdir=/tmp/java -cp "$(cat "$stage/classpath")" \
    org.junit.platform.console.ConsoleLauncher execute \
    --select-class org.apache.iceberg.rest.RESTCompatibilityKitCatalogTests \
    --config rck.local=false --details=tree --disable-banner --disable-ansi-colors \
    >"$stage/rck.log" 2>&1 || true
  exit 0
fi
sluice=$1 classpath=$2 report=$3
stage=$(mktemp -d -p /var/tmp sluice-rck.XXXXXX)
trap 'rm -rf "$stage"' EXIT
cp "$sluice" "$stage/sluice"
cp "$classpath" "$stage/classpath"
unshare --mount --propagation private "$0" --inside "$stage"
mkdir -p "$report"
cp "$stage/rck.log" "$stage/serve.log" "$report/"
sed -n '/Test run finished/,$p' "$report/rck.log"
