#!/usr/bin/env bash
# The last GPU call of 2026-11-29: detcoll env and verify on two H200s, the
# PyTorch check (python/detcoll over libdetcoll.so) and the GPU FFN TP test.
# Run from the repository root on the GPU machine with bin/ carried:
#   OUT=/some/dir bash docs/benchmarks/final-h200x2-run.sh
set -u
export NCCL_NVLS_ENABLE=0
FINAL=${OUT:?set OUT}
# Only a few files come back from the machine: work in a scratch folder, then
# pack it into $FINAL/final.tgz beside a summary.
OUT=$(mktemp -d)
summary=()
step() { # name timeout command...
  local name=$1 t=$2; shift 2
  local start=$(date +%s)
  timeout "$t" "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  summary+=("$(printf '%-10s rc=%-3s %4ss' "$name" "$rc" "$(( $(date +%s) - start ))")")
}
step env 20 bin/detcoll env
step verify 70 bin/detcoll launch --standalone --nproc-per-node 2 -- bin/detcoll verify --device cuda --world-sizes 1,2,3,4 --counts 1,7,1031
[ -f docs/benchmarks/pytorch-h200x2-run.sh ] && mkdir -p "$OUT/pytorch" && step pytorch 135 env OUT="$OUT/pytorch" BUDGET=120 T_RUN=45 GO_BENCH=0 bash docs/benchmarks/pytorch-h200x2-run.sh
[ -f docs/benchmarks/ffn-h200x2-run.sh ] && mkdir -p "$OUT/ffn" && step ffn 150 env OUT="$OUT/ffn" T_FFN=140 bash docs/benchmarks/ffn-h200x2-run.sh
{
  tail -3 "$OUT/verify.txt"
  for f in "$OUT"/pytorch/summary.md "$OUT"/ffn.txt "$OUT"/pytorch.txt; do [ -f "$f" ] && tail -25 "$f"; done
  printf '%s\n' "${summary[@]}"
} > "$OUT/summary.txt"
tar czf "$FINAL/final.tgz" -C "$OUT" .
cp "$OUT/summary.txt" "$FINAL/summary.txt"
cat "$FINAL/summary.txt"
