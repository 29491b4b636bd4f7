#!/usr/bin/env bash
# Before/after a restructuring: the same benchmarks from two source trees, run back to back on one GPU,
# each benchmark old tree then new tree, so that both see the same machine state.
#
#   benchmarks/compare_trees.sh OLD_TREE OUT_DIR rounds N SCRIPT [ARGS]   this tree's SCRIPT (one JSON line a run,
#                                   its first argument the label) in the old tree, then in this one, N times
#   benchmarks/compare_trees.sh OLD_TREE OUT_DIR bench "ARGS" ...         `python -m gpumat bench ARGS` in each tree
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
rounds)
    count=$1 script=$2
    shift 2
    name=$(basename "$script" .py)
    for _ in $(seq "$count"); do
        run "$old" before "$new/$script" before "$@" >>"$out/$name.jsonl"
        run "$new" after "$new/$script" after "$@" >>"$out/$name.jsonl"
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
    echo "usage: $0 OLD_TREE OUT_DIR rounds N SCRIPT [ARGS...] | bench ARGS..." >&2
    exit 2
    ;;
esac
