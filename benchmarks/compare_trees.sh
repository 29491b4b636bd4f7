#!/usr/bin/env bash
# Before/after a restructuring: the same benchmarks from two source trees, run back to back on one GPU,
# each benchmark old tree then new tree, so that both see the same machine state.
#
#   benchmarks/compare_trees.sh OLD_TREE OUT_DIR latency [ROUNDS]     64^3 per-call cost, interleaved rounds
#   benchmarks/compare_trees.sh OLD_TREE OUT_DIR bench "ARGS" ...     `python -m gpumat bench ARGS` in each tree
#
# Both trees' kernels must be built already (ARCHS=90 python3 build_ptx.py in each). JSON lands in
# OUT_DIR/before and OUT_DIR/after; benchmarks/compare_results.py reads them.
set -uo pipefail
old=$(cd "$1" && pwd)
out=$(mkdir -p "$2" && cd "$2" && pwd)
what=$3
shift 3
new=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out/before" "$out/after"

run() { # TREE LABEL PYTHON-ARGS...
    local tree=$1 label=$2
    shift 2
    (cd "$tree" && GPUMAT_RESULTS="$out/$label" PYTHONPATH=src PYTHONUNBUFFERED=1 python3 "$@")
}

case "$what" in
latency)
    for _ in $(seq "${1:-3}"); do
        run "$old" before "$new/benchmarks/latency_64.py" before >>"$out/latency.jsonl"
        run "$new" after benchmarks/latency_64.py after >>"$out/latency.jsonl"
    done
    ;;
bench)
    for args in "$@"; do
        tag=${args// /_}
        # shellcheck disable=SC2086  # ARGS are several words on purpose
        run "$old" before -m gpumat bench $args >"$out/before-$tag.log" 2>&1 || echo "old tree: bench $args failed"
        # shellcheck disable=SC2086
        run "$new" after -m gpumat bench $args >"$out/after-$tag.log" 2>&1 || echo "new tree: bench $args failed"
        tail -n 3 "$out/after-$tag.log"
    done
    ;;
*)
    echo "usage: $0 OLD_TREE OUT_DIR latency [ROUNDS] | bench ARGS..." >&2
    exit 2
    ;;
esac
