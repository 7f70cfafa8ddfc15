#!/usr/bin/env bash
# The GPU run of package gpu/gpuattn: the context-parallel ag_rs attention
# communication with device buffers (devcomm AllGatherMany of the zigzag Q,
# K, V and position shards, the NVRTC reorder kernel, the local shard of the
# output, the all-gather of the output gradient and the -0 ReduceScatterMany
# of dQ, dK, dV; the attention core on the host) at CP = 2 on the two-H200
# machine, against CP = 1 on each GPU alone and against package parallel's
# host attention, raw bytes of out, lse, dQ, dK, dV.
#
# Run from the repository root on the GPU machine, with bin/ built on the CPU
# machine:
#
#   CGO_ENABLED=1 go build -o bin/detcoll ./cmd/detcoll
#   CGO_ENABLED=1 go test -c -o bin/gpuattn.test ./gpu/gpuattn
#
# Outputs go to $OUT (default ./out): machine.txt, gpuattn-tests.log (both
# ranks), and from rank 0 gpuattn-cp2.{json,md}. The last lines printed are
# the summary; the exit status is 0 only when the test ran and passed on both
# ranks.
set -u -o pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd) # absolute: the test processes write there
export OUT
export NCCL_NVLS_ENABLE=0 # never NVLink multicast (see GPU.md)
if [ -z "${DETCOLL_GIT_COMMIT:-}" ]; then
	DETCOLL_GIT_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo unknown)
fi
export DETCOLL_GIT_COMMIT

for b in bin/detcoll bin/gpuattn.test; do
	if [ ! -x "$b" ]; then
		echo "missing $b: build it on the CPU machine (see the top of $0) and carry bin/" >&2
		exit 2
	fi
done

{
	date -u
	nvidia-smi -L
	nvidia-smi --query-gpu=name,driver_version --format=csv
	ldconfig -p | grep -E 'libnccl|libcuda\.so|nvrtc'
	env | grep -E '^(NCCL_|DETCOLL_|CUDA_)'
} >"$OUT/machine.txt" 2>&1

log="$OUT/gpuattn-tests.log"
start=$SECONDS
timeout 90 bin/detcoll launch --standalone --nproc-per-node 2 -- \
	bin/gpuattn.test -test.run GPU -test.v -test.timeout 80s >"$log" 2>&1
t=$?
took=$((SECONDS - start))

passed=$(grep -c -- '--- PASS' "$log")
failed=$(grep -c -- '--- FAIL' "$log")
skipped=$(grep -c -- '--- SKIP' "$log")
grep -E -- 'rank [0-9]+ of|--- (FAIL|SKIP)|FAILED|differ|panic:|test timed out|failed:|not started|no CUDA|no GPU|no NVRTC|no NCCL' "$log" | cut -c1-300 | head -25
if [ -f "$OUT/gpuattn-cp2.md" ]; then
	echo "== gpuattn-cp2.md"
	grep -E '^\| seq|^Bitwise' "$OUT/gpuattn-cp2.md" | cut -c1-300
else
	echo "== gpuattn-cp2.md: not written"
fi
echo "== summary"
grep -E 'SUMMARY' "$log" || echo "SUMMARY line missing (see $log)"
echo "gpuattn GPU test, 2 ranks: exit $t in $took s (124 = killed by timeout); both ranks: $passed passed, $failed failed, $skipped skipped"
[ "$t" -eq 0 ] && [ "$failed" -eq 0 ] && [ "$skipped" -eq 0 ] && [ "$passed" -gt 0 ]
