#!/usr/bin/env bash
# The GPU run behind docs/benchmarks/cuda-h200x2-*.{json,svg,md}: tests on two
# GPUs under the launcher, then the eager and the CUDA-graph benchmark, bf16,
# native NCCL in the same run. Runs from the repository root on the two-H200
# machine, with bin/ built on the CPU machine:
#
#   CGO_ENABLED=1 go build -o bin/detcoll ./cmd/detcoll
#   CGO_ENABLED=1 go test -c -o bin/devcomm.test ./gpu/devcomm
#
# Outputs go to $OUT (default ./out); TAR=1 keeps the reports and plots and
# packs everything else into logs.tar.gz. STEPS picks the steps (default
# "machine tests eager graph"; also "p2p": send/recv gathers with NCCL's INIT
# log, run 1; "sweep": the pipeline chunk sweep, run 2). Every step runs even
# if an earlier one failed; the exit status says whether all passed.
set -u -o pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 # never NVLink multicast (see GPU.md)
SIZES=${SIZES:-"4096 65536 1048576 16777216 268435456"}
ITERS=${ITERS:-100}
STEPS=${STEPS:-"machine tests eager graph"}
rc=0
L() { bin/detcoll launch --standalone --nproc-per-node 2 -- "$@"; }
step() { [[ " $STEPS " == *" $1 "* ]]; }

if step machine; then
	{ date -u; uname -a; nvidia-smi -L; nvidia-smi topo -m;
	  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nproc; free -g;
	  ldconfig -p | grep -E 'libnccl|libcuda.so|nvrtc'; env | grep -E '^NCCL_' ; } > "$OUT/machine.txt" 2>&1
fi

if step tests; then
	start=$SECONDS
	L bin/devcomm.test -test.run GPU -test.v -test.timeout 400s > "$OUT/tests.log" 2>&1
	t=$?; [ $t -ne 0 ] && rc=1
	echo "== tests (2 ranks): exit $t in $((SECONDS-start)) s; $(grep -c -- '--- PASS' "$OUT/tests.log") passed, $(grep -c -- '--- FAIL' "$OUT/tests.log") failed, $(grep -c -- '--- SKIP' "$OUT/tests.log") skipped"
	grep -E -- '--- (FAIL|SKIP)|panic|checks, [0-9]+ failed' "$OUT/tests.log" | head -20
fi

bench() { # name, extra flags...
	local name=$1; shift
	local start=$SECONDS
	L bin/detcoll bench --device cuda --dtype bf16 --warmup 20 --iterations "$ITERS" --samples 10 \
		--size-bytes $SIZES --output "$OUT/$name.json" --plot "$OUT/$name.svg" "$@" > "$OUT/$name.log" 2>&1
	local t=$?; [ $t -ne 0 ] && rc=1
	echo "== bench $name: exit $t in $((SECONDS-start)) s"
}
step eager && bench eager
step graph && bench graph --graph
if step p2p; then
	DETCOLL_NCCL_GATHER=p2p NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT SIZES="1048576 16777216 268435456" bench eager-p2p
	grep -m3 -E 'p2p channels|coll channels' "$OUT/eager-p2p.log"
fi
if step sweep; then
	# The pipeline chunk (default 64 MiB) at 64 and 256 MiB; 0 = no pipelining.
	for ch in 0 33554432 134217728; do
		DETCOLL_NCCL_CHUNK_BYTES=$ch SIZES="67108864 268435456" ITERS=20 bench sweep-chunk-$ch --operations all_reduce reduce_scatter
	done
fi

for name in eager graph eager-p2p sweep-chunk-0 sweep-chunk-33554432 sweep-chunk-134217728; do
	[ -f "$OUT/$name.log" ] || continue
	echo "== $name"
	grep -E '^\[rank 0\] (all_|reduce_|op |detcoll |all ranks)' "$OUT/$name.log" | sed -E 's/^\[rank 0\] //' | cut -c1-150
	grep -iE 'error|fail' "$OUT/$name.log" | head -5
done
# Few files come back from the GPU machine: keep the reports and plots, tar the rest.
if [ -n "${TAR:-}" ]; then
	rest=$(cd "$OUT" && ls | grep -vxF -e eager.json -e graph.json -e eager.svg -e graph.svg)
	if [ -n "$rest" ]; then
		tar czf /tmp/detcoll-logs.tar.gz -C "$OUT" $rest && (cd "$OUT" && rm -f $rest) && mv /tmp/detcoll-logs.tar.gz "$OUT/logs.tar.gz"
	fi
fi
exit $rc
