#!/usr/bin/env bash
# Re-check on two H200s after the device runtime became vendor-neutral
# (gpu/devrt; merge 32c6d79): every GPU test package, `detcoll verify`, `detcoll
# env` and a short benchmark (auto and the NCCL-transport a2a_tree against
# NCCL, eager and graphs). From the repository root, bin/ built on the CPU
# machine:
#
#   CGO_ENABLED=1 go build -o bin/detcoll ./cmd/detcoll
#   go test -c -o bin/gpu.test ./gpu
#   for p in devcomm gpuffn gpuattn; do CGO_ENABLED=1 go test -c -o bin/$p.test ./gpu/$p; done
set -u -o pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 DETCOLL_TEST_REQUIRE_IPC=1
rc=0
L() { bin/detcoll launch --standalone --nproc-per-node 2 -- "$@"; }
count() { echo "$(grep -c -- '--- PASS' "$1") passed, $(grep -c -- '--- FAIL' "$1") failed, $(grep -c -- '--- SKIP' "$1") skipped"; }
{ date -u; nvidia-smi -L; } > "$OUT/machine.txt" 2>&1
bin/gpu.test -test.run GPU -test.v -test.timeout 300s > "$OUT/tests-gpu.log" 2>&1 || rc=1
echo "== gpu (one process): $(count "$OUT/tests-gpu.log")"
for p in devcomm gpuffn gpuattn; do
	L bin/$p.test -test.run GPU -test.v -test.timeout 400s > "$OUT/tests-$p.log" 2>&1 || rc=1
	echo "== $p (2 ranks): $(count "$OUT/tests-$p.log")"
	grep -E -- '--- FAIL|panic' "$OUT/tests-$p.log" | head -5
done
L bin/detcoll verify --device cuda > "$OUT/verify.log" 2>&1 || rc=1
echo "== verify: $(tail -1 "$OUT/verify.log")"
bin/detcoll env > "$OUT/env.txt" 2>&1
for mode in ${BENCH_MODES-eager graph}; do
	flag=""; [ $mode = graph ] && flag=--graph
	L bin/detcoll bench --device cuda --dtype bf16 --warmup 10 --iterations 50 --samples 5 --algorithms auto,a2a_tree \
		--size-bytes 4096 65536 1048576 16777216 268435456 $flag --output "$OUT/$mode.json" > "$OUT/$mode.log" 2>&1 || rc=1
	python3 docs/benchmarks/ipc_summary.py "$OUT/$mode.json"
done
exit $rc
