#!/usr/bin/env bash
# Issue 8: the runs a four- or eight-H200 machine is for (not yet lent to this
# project; see docs/benchmarks/README.md). From the repository root on that
# machine, with bin/ built on the CPU machine:
#
#   CGO_ENABLED=1 go build -o bin/detcoll ./cmd/detcoll
#   CGO_ENABLED=1 go test -c -o bin/devcomm.test ./gpu/devcomm
#
# W (default: every GPU) ranks: the GPU tests and `detcoll verify` at W, then
# the seed's benchmark (bf16; all_reduce, all_gather, reduce_scatter; 4 KiB to
# 256 MiB; warm-up 20, 100 iterations, 10 samples) eager and in CUDA graphs
# with native NCCL in the same run, every algorithm (NCCL transport and peer
# memory) and auto. Outputs in $OUT; a summary table is printed last.
set -u -o pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 # never NVLink multicast (see GPU.md)
W=${W:-$(nvidia-smi -L | wc -l)}
rc=0
L() { bin/detcoll launch --standalone --nproc-per-node "$W" -- "$@"; }
{ date -u; nvidia-smi -L; nvidia-smi topo -m; } > "$OUT/machine-w$W.txt" 2>&1
L bin/devcomm.test -test.run GPU -test.v -test.timeout 550s > "$OUT/tests-w$W.log" 2>&1 || rc=1
echo "== tests W=$W: $(grep -c -- '--- PASS' "$OUT/tests-w$W.log") passed, $(grep -c -- '--- FAIL' "$OUT/tests-w$W.log") failed"
L bin/detcoll verify --device cuda > "$OUT/verify-w$W.log" 2>&1 || rc=1
tail -2 "$OUT/verify-w$W.log"
for mode in eager graph; do
	flag=""; [ $mode = graph ] && flag=--graph
	L bin/detcoll bench --device cuda --dtype bf16 --operations all_reduce all_gather reduce_scatter \
		--size-bytes 4096 65536 1048576 16777216 268435456 --warmup 20 --iterations 100 --samples 10 \
		--algorithms gather_tree,a2a_tree,one_shot,two_shot,auto $flag \
		--output "$OUT/seed-w$W-$mode.json" --plot "$OUT/seed-w$W-$mode.svg" > "$OUT/seed-w$W-$mode.log" 2>&1 || rc=1
	python3 docs/benchmarks/ipc_summary.py "$OUT/seed-w$W-$mode.json"
done
exit $rc
