#!/usr/bin/env bash
# GPU check at HEAD on whatever machine is lent (one H200 or more): every GPU
# test package, the one-GPU peer-memory kernel test (W = 2…8 ranks as streams
# of one process), `detcoll verify --device cuda`, `detcoll env`, and a short
# benchmark against NCCL (default and symmetric-window buffers). W is the
# number of GPUs. From the repository root, bin/ built on the CPU machine:
#
#   CGO_ENABLED=1 go build -o bin/detcoll ./cmd/detcoll
#   go test -c -o bin/gpu.test ./gpu
#   for p in devcomm devverify gpuffn gpuattn; do CGO_ENABLED=1 go test -c -o bin/$p.test ./gpu/$p; done
set -u -o pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
W=$(nvidia-smi -L | wc -l)
rc=0
L() { bin/detcoll launch --standalone --nproc-per-node "$W" -- "$@"; }
count() { echo "$(grep -c -- '--- PASS' "$1") passed, $(grep -c -- '--- FAIL' "$1") failed, $(grep -c -- '--- SKIP' "$1") skipped"; }
{ date -u; nvidia-smi -L; bin/detcoll --version; } > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
timeout 200 bin/gpu.test -test.run GPU -test.v -test.timeout 190s > "$OUT/tests-gpu.log" 2>&1 || rc=1
echo "== gpu (one process): $(count "$OUT/tests-gpu.log")"
timeout 330 bin/devcomm.test -test.run GPUIPCKernelsOneGPU -test.v -test.timeout 320s > "$OUT/tests-devcomm-onegpu.log" 2>&1 || rc=1
echo "== devcomm one-GPU W=2..8 kernels: $(count "$OUT/tests-devcomm-onegpu.log")"
for p in devcomm devverify gpuffn gpuattn; do
	[ -x bin/$p.test ] || continue
	timeout 300 bash -c "$(declare -f L); W=$W; L bin/$p.test -test.run GPU -test.v -test.timeout 280s" > "$OUT/tests-$p.log" 2>&1 || rc=1
	echo "== $p ($W ranks): $(count "$OUT/tests-$p.log")"
	grep -E -- '--- FAIL|panic' "$OUT/tests-$p.log" | head -5
done
timeout 200 bin/detcoll verify --device cuda > "$OUT/verify.log" 2>&1 || rc=1
echo "== verify (standalone): $(grep -E 'checks, [0-9]+ failed' "$OUT/verify.log" | tail -1)"
grep -m1 -A12 -E '^(panic|fatal error)' "$OUT/verify.log"
bin/detcoll env > "$OUT/env.txt" 2>&1
for mode in ${BENCH_MODES-eager graph}; do
	flag=""; [ $mode = graph ] && flag=--graph
	timeout 200 bash -c "$(declare -f L); W=$W; L bin/detcoll bench --device cuda --dtype bf16 --warmup 10 --iterations 50 --samples 5 \
		--size-bytes 4096 262144 16777216 $flag --output $OUT/$mode.json" > "$OUT/$mode.log" 2>&1 || rc=1
	tail -20 "$OUT/$mode.log"
done
# The device tool returns a limited number of files: the logs go in one archive.
(cd "$OUT" && tar czf logs.tar.gz *.log *.txt *.md 2>/dev/null && rm -f *.log *.txt *.md)
exit $rc
