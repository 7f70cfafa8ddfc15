#!/usr/bin/env bash
# Re-check of the GPU test set-up after it moved to internal/gputest
# (2026-11-29): a short GPU test of each of the three packages on two H200s.
# From the repository root with bin/ built and carried; output in $OUT.
set -u
export NCCL_NVLS_ENABLE=0
OUT=${OUT:-./out}
mkdir -p "$OUT"
for spec in "devcomm GPUMisuse|GPUWorkspaceBounds" "gpuffn GPUFFNSmall" "gpuattn GPUAttnCP"; do
	set -- $spec
	timeout 90 bin/detcoll launch --standalone --nproc-per-node 2 -- bin/$1.test -test.run "$2" -test.v > "$OUT/$1.log" 2>&1
	echo "$1 ($2): exit $?; $(grep -c -- '--- PASS' "$OUT/$1.log") passed, $(grep -c -- '--- FAIL' "$OUT/$1.log") failed, $(grep -c -- '--- SKIP' "$OUT/$1.log") skipped" | tee -a "$OUT/summary.txt"
done
