#!/usr/bin/env bash
# Smoke run of every fuzz target, for CI (.ci/run) and by hand: installs
# cargo-fuzz if it is missing, writes the seed corpus, builds each target in
# fuzz/fuzz_targets/ (release, debug assertions, AddressSanitizer: cargo-fuzz's
# defaults) and runs each for a fixed time. A crash, leak, timeout or
# out-of-memory fails the script (cargo fuzz exits non-zero), so a target that
# no longer compiles or that finds a bug fails CI. The long recorded runs are
# in fuzz/README.md; this only keeps the targets from rotting.
#
# FUZZ_SMOKE_SECONDS sets the time per target (default 20).
set -euo pipefail
cd "$(dirname "$0")/.."

cargo_fuzz_version=0.13.2
seconds_per_target=${FUZZ_SMOKE_SECONDS:-20}

if [ "$(cargo fuzz --version 2>/dev/null || true)" != "cargo-fuzz $cargo_fuzz_version" ]; then
    cargo install cargo-fuzz --locked --version "$cargo_fuzz_version"
fi
# The stable toolchain with the -Z flags cargo-fuzz passes (fuzz/README.md).
export RUSTC_BOOTSTRAP=1

cargo run --quiet --manifest-path fuzz/Cargo.toml --bin seed_corpus

targets=()
for source in fuzz/fuzz_targets/*.rs; do
    targets+=("$(basename "$source" .rs)")
done
for target in "${targets[@]}"; do
    cargo fuzz build "$target"
done
log_dir=$(mktemp -d)
for target in "${targets[@]}"; do
    log="$log_dir/$target.log"
    if cargo fuzz run "$target" -- -max_total_time="$seconds_per_target" -max_len=4096 -print_final_stats=1 \
        >"$log" 2>&1; then
        echo "fuzz smoke: $target ok for ${seconds_per_target} s: $(grep -E '^stat::(number_of_executed_units|average_exec_per_sec)' "$log" | tr '\n' ' ')"
    else
        tail -n 80 "$log"
        echo "fuzz smoke: $target failed; its input is in fuzz/artifacts/$target/ (fuzz/README.md says how to replay it)"
        exit 1
    fi
done
