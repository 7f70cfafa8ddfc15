#!/usr/bin/env bash
# The GPU run behind docs/benchmarks/ipc-h200x2-*: the peer-memory (CUDA IPC)
# tests on two GPUs under the launcher, then the benchmark of one_shot,
# two_shot and the peer-memory all-gather and reduce-scatter against native
# NCCL in the same run, bf16, eager and in CUDA graphs. From the repository
# root on the two-H200 machine, with bin/ built on the CPU machine:
#
#   CGO_ENABLED=1 go build -o bin/detcoll ./cmd/detcoll
#   CGO_ENABLED=1 go test -c -o bin/devcomm.test ./gpu/devcomm
#
# STEPS (default "machine tests eager graph"; also "sweep": the grid sweep,
# "alltests": every GPU test of the package). Outputs in $OUT; a summary
# table (docs/benchmarks/ipc_summary.py) is printed last.
set -u -o pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 # never NVLink multicast (see GPU.md)
export DETCOLL_TEST_REQUIRE_IPC=1
SIZES=${SIZES:-"4096 65536 262144 1048576 16777216 67108864 268435456"}
ITERS=${ITERS:-100}
SAMPLES=${SAMPLES:-10}
WARMUP=${WARMUP:-20}
ALGS=${ALGS:-"one_shot,two_shot,a2a_tree,auto"}
STEPS=${STEPS:-"machine tests eager graph"}
rc=0
L() { bin/detcoll launch --standalone --nproc-per-node 2 -- "$@"; }
step() { [[ " $STEPS " == *" $1 "* ]]; }

if step machine; then
	{ date -u; nvidia-smi -L; nvidia-smi topo -m; nvidia-smi --query-gpu=name,driver_version --format=csv; } > "$OUT/machine.txt" 2>&1
fi
tests() { # name, -test.run pattern
	local start=$SECONDS
	L bin/devcomm.test -test.run "$2" -test.v -test.timeout 500s > "$OUT/$1.log" 2>&1
	local t=$?; [ $t -ne 0 ] && rc=1
	echo "== $1: exit $t in $((SECONDS-start)) s; $(grep -c -- '--- PASS' "$OUT/$1.log") passed, $(grep -c -- '--- FAIL' "$OUT/$1.log") failed, $(grep -c -- '--- SKIP' "$OUT/$1.log") skipped"
	grep -E -- '--- (FAIL|SKIP)|panic|checks, [1-9][0-9]* failed|ErrIPC|timeout|close:' "$OUT/$1.log" | head -12
}
step tests && tests tests-ipc 'GPUIPC'
if step onegpu; then
	# W = 2…8 ranks as streams of one process on GPU 0 (no launcher).
	start=$SECONDS
	bin/devcomm.test -test.run GPUIPCKernelsOneGPU -test.v -test.timeout 500s > "$OUT/tests-onegpu.log" 2>&1
	t=$?; [ $t -ne 0 ] && rc=1
	echo "== tests-onegpu: exit $t in $((SECONDS-start)) s"; grep -E -- '--- |W=' "$OUT/tests-onegpu.log" | head -12
fi
step alltests && tests tests-all 'GPU'
if step others; then
	# The layers over devcomm (their CP/TP lanes now take the peer-memory path).
	for p in gpuattn gpuffn; do
		start=$SECONDS
		L bin/$p.test -test.run GPU -test.v -test.timeout 300s > "$OUT/tests-$p.log" 2>&1
		t=$?; [ $t -ne 0 ] && rc=1
		echo "== tests-$p: exit $t in $((SECONDS-start)) s; $(grep -c -- '--- PASS' "$OUT/tests-$p.log") passed, $(grep -c -- '--- FAIL' "$OUT/tests-$p.log") failed, $(grep -c -- '--- SKIP' "$OUT/tests-$p.log") skipped"
	done
fi

bench() { # name, extra flags...
	local name=$1; shift
	local start=$SECONDS
	L bin/detcoll bench --device cuda --dtype bf16 --warmup "$WARMUP" --iterations "$ITERS" --samples "$SAMPLES" \
		--algorithms "$ALGS" --size-bytes $SIZES --output "$OUT/$name.json" --plot "$OUT/$name.svg" "$@" > "$OUT/$name.log" 2>&1
	local t=$?; [ $t -ne 0 ] && rc=1
	echo "== bench $name: exit $t in $((SECONDS-start)) s"
	[ $t -ne 0 ] && tail -5 "$OUT/$name.log"
}
step eager && bench eager
step graph && bench graph --graph
if step sweep; then
	# In CUDA graphs: LL lines on/off for small messages, the one-shot/two-shot
	# threshold, and the most blocks of large messages. Reports in sweep.tar.gz.
	mkdir -p "$OUT/sweep"
	for ll in 0 524288; do
		(export ITERS=20 SAMPLES=5 WARMUP=5 DETCOLL_IPC_LL_BYTES=$ll SIZES="4096 16384 65536 262144 524288" ALGS=one_shot
		 bench sweep/ll-$ll --graph)
	done
	(export ITERS=20 SAMPLES=5 WARMUP=5 SIZES="1048576 2097152 4194304 8388608" ALGS=one_shot,two_shot
	 bench sweep/oneshot --graph --operations all_reduce)
	for b in ${BLOCKS:-16 24 48}; do
		(export ITERS=10 SAMPLES=5 WARMUP=3 DETCOLL_IPC_BLOCKS=$b SIZES="67108864 268435456" ALGS=two_shot
		 bench sweep/blocks-$b --graph)
	done
	for f in "$OUT"/sweep/*.json; do python3 docs/benchmarks/ipc_summary.py "$f"; done > "$OUT/sweep-summary.txt"
	tar -C "$OUT" -czf "$OUT/sweep.tar.gz" sweep && rm -rf "$OUT/sweep"
	cat "$OUT/sweep-summary.txt"
fi
if step large; then
	# Large messages: most blocks and capacity, A/B in one run (graphs).
	mkdir -p "$OUT/sweep"
	for b in ${LARGE_BLOCKS:-32 64}; do
		(export ITERS=20 SAMPLES=5 WARMUP=5 DETCOLL_IPC_BLOCKS=$b DETCOLL_IPC_BYTES=${LARGE_CAP:-67108864}
		 export SIZES="16777216 67108864 268435456" ALGS=two_shot
		 bench sweep/large-blocks-$b --graph)
	done
	for f in "$OUT"/sweep/*.json; do python3 docs/benchmarks/ipc_summary.py "$f"; done > "$OUT/sweep-summary.txt"
	tar -C "$OUT" -czf "$OUT/sweep.tar.gz" sweep && rm -rf "$OUT/sweep"
	cat "$OUT/sweep-summary.txt"
fi
for f in "$OUT"/*.json; do [ -e "$f" ] && python3 docs/benchmarks/ipc_summary.py "$f"; done > "$OUT/summary.txt"
cat "$OUT/summary.txt"
exit $rc
