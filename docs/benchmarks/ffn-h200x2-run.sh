#!/usr/bin/env bash
# The GPU run behind docs/benchmarks/ffn-h200x2-*: the GPU FFN of package
# gpu/gpuffn (cuBLAS leaf GEMMs in canonical K chunks, detcoll's tree kernel,
# detcoll's deterministic all-reduce over NCCL) at TP = 2 against TP = 1 on
# the two-H200 machine, forward and backward, compared bit for bit, with the
# time of every phase and of each collective beside the layer's total.
#
# Run from the repository root on the GPU machine, with bin/ built on the CPU
# machine:
#
#   CGO_ENABLED=1 go build -o bin/detcoll ./cmd/detcoll
#   CGO_ENABLED=1 go test -c -o bin/gpuffn.test ./gpu/gpuffn
#
# Outputs go to $OUT (default ./out): machine.txt, gpuffn-tests.log (both
# ranks, prefixed [rank N]), and from rank 0 gpuffn-small.{json,md} and
# gpuffn-qwen3-8b.{json,md}. The last lines printed are a summary; the exit
# status is 0 only when every test ran and passed on both ranks.
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

for b in bin/detcoll bin/gpuffn.test; do
	if [ ! -x "$b" ]; then
		echo "missing $b: build it on the CPU machine (see the top of $0) and carry bin/" >&2
		exit 2
	fi
done

# The machine, the libraries the test will load, the environment.
{
	date -u
	uname -a
	nvidia-smi -L
	nvidia-smi topo -m
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
	nproc
	free -g
	ls -l /usr/local/cuda/lib64/libcublas* /usr/local/cuda/lib64/libnvrtc.so*
	ldconfig -p | grep -E 'libnccl|libcuda\.so|nvrtc|cublas'
	env | grep -E '^(NCCL_|DETCOLL_|CUDA_)'
} >"$OUT/machine.txt" 2>&1

log="$OUT/gpuffn-tests.log"
start=$SECONDS
timeout "${T_FFN:-240}" bin/detcoll launch --standalone --nproc-per-node 2 -- \
	bin/gpuffn.test -test.run GPU -test.v -test.timeout "$(( ${T_FFN:-240} - 20 ))s" >"$log" 2>&1
t=$?
took=$((SECONDS - start))

passed=$(grep -c -- '--- PASS' "$log")
failed=$(grep -c -- '--- FAIL' "$log")
skipped=$(grep -c -- '--- SKIP' "$log")
echo "== gpuffn GPU tests, 2 ranks: exit $t in $took s (124 = killed by timeout);" \
	"both ranks together: $passed passed, $failed failed, $skipped skipped"
grep -E -- 'communicator ready|--- (FAIL|SKIP)|FAILED|differs from|panic:|test timed out|failed:|: (not started|no CUDA|no GPU|no NVRTC|no NCCL|no cuBLAS|world size)' "$log" | cut -c1-300 | head -25
for f in "$OUT"/gpuffn-small.md "$OUT"/gpuffn-qwen3-8b.md; do
	if [ ! -f "$f" ]; then
		echo "== $(basename "$f"): not written"
		continue
	fi
	echo "== $(basename "$f")"
	grep -E '^## Checks|^- machine|^\| y \||^\| (fwd|bwd)\.(total|allreduce[a-z_]*) |^\| host wall|^\| [0-9.e-]+ \|' "$f" | cut -c1-200
done
[ "$t" -eq 0 ] && [ "$failed" -eq 0 ] && [ "$skipped" -eq 0 ] && [ "$passed" -gt 0 ]
