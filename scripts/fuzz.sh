#!/usr/bin/env bash
# Runs every fuzz target under fuzz/ for a bounded time (default 20 s each; the
# first argument overrides it), starting from the committed seed corpus in
# fuzz/corpus/TARGET. New inputs the fuzzer finds go to a temporary directory,
# not into the repository. A crash fails the run and names the input
# (fuzz/artifacts/TARGET/crash-…); turn it into a regression test, fix it,
# and add it to the corpus. Installs the nightly toolchain and cargo-fuzz when
# missing.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"
export PATH="$HOME/.cargo/bin:$PATH"

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "==> installing the nightly toolchain (cargo-fuzz needs it)"
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "==> installing cargo-fuzz"
  cargo install cargo-fuzz --locked --quiet
fi

# No sanitizer: the workspace forbids unsafe code, so libFuzzer's coverage and
# Rust's own checks (debug assertions, overflow checks) find what there is.
flags=(--sanitizer none --debug-assertions)
echo "==> building the fuzz targets"
cargo +nightly fuzz build "${flags[@]}"
work=$(mktemp -d -t sluice-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
for target in $(cargo +nightly fuzz list); do
  echo "==> fuzzing $target for ${seconds}s"
  mkdir -p "$work/$target" "fuzz/corpus/$target"
  # The fuzzer's status, not grep's: `|| true` after the pipeline used to
  # reset PIPESTATUS, so crashes were printed and passed.
  status=0
  cargo +nightly fuzz run "${flags[@]}" "$target" "$work/$target" "fuzz/corpus/$target" -- \
    -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 2>&1 |
    { grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|==|thread|SUMMARY|Done)' || true; } ||
    status=$?
  if [ "$status" -ne 0 ]; then
    echo "fuzz target $target failed; the input is under fuzz/artifacts/$target/" >&2
    exit 1
  fi
done
echo "==> fuzzing found nothing"
