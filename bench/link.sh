#!/usr/bin/env bash
# Benchmark: `--concurrency auto` against a sweep of fixed values on a link
# limited to 1 Gbit/s each way: a veth pair into a network namespace with a
# `tbf` qdisc on both ends (netem is not available on these kernels), MinIO
# inside the namespace. A 4 GiB file and 1,000 files of 1 MiB, up and down.
# Needs root (ip netns, tc). Creates the namespace, runs link.py, removes it.
#
#   bench/link.sh [--rate 1gbit] [--runs N] [--sweep 1,2,4,...] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/peers.sh
ensure_peers minio
cargo build --release -p sluice-cli --quiet

rate=1gbit
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rate) rate="$2"; shift 2 ;;
        *) args+=("$1"); shift ;;
    esac
done

ns="sluice-link-$$"
host_if="sl$$h"
ns_if="sl$$n"
host_ip=10.213.0.1
ns_ip=10.213.0.2
cleanup() {
    ip link del "$host_if" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT
ip netns add "$ns"
ip link add "$host_if" type veth peer name "$ns_if"
ip link set "$ns_if" netns "$ns"
ip addr add "$host_ip/30" dev "$host_if"
ip link set "$host_if" up
ip netns exec "$ns" ip addr add "$ns_ip/30" dev "$ns_if"
ip netns exec "$ns" ip link set "$ns_if" up
ip netns exec "$ns" ip link set lo up
# Each direction: a token bucket at the rate; the burst is what one timer
# tick at that rate sends, the queue holds 20 ms of it.
tc qdisc add dev "$host_if" root tbf rate "$rate" burst 256kb latency 20ms
ip netns exec "$ns" tc qdisc add dev "$ns_if" root tbf rate "$rate" burst 256kb latency 20ms

python3 bench/link.py --sluice target/release/sluice --netns "$ns" \
    --address "$ns_ip" --rate "$rate" "${args[@]}"
