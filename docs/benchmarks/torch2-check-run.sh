#!/usr/bin/env bash
# The torch.distributed backend under torch 2.x on the GPU machine (whose venv
# has torch 2.11): the CUDA-tensor checks at W = 1 for both backend strings,
# and the CPU-tensor suites (main, premul, ddp, faults) at W = 1, 2, 4 —
# CI's Debian torch 1.13 cannot run PREMUL_SUM's torch-2 path or the
# per-device backend form. From the repository root, bin/libdetcoll.so built
# on the CPU machine (CGO_ENABLED=1 go build -buildmode=c-shared -o bin/libdetcoll.so ./capi).
set -u -o pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT"
V=${TORCH_VENV:-/opt/torch/.venv}/bin
export DETCOLL_LIB=$PWD/bin/libdetcoll.so PYTHONPATH=$PWD/python OMP_NUM_THREADS=2
$V/python -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee "$OUT/torch.txt"
rc=0
port=29700
for b in ${BACKENDS-detcoll cpu:gloo,cuda:detcoll}; do
	port=$((port + 1))
	f="$OUT/cuda-${b//[:,]/_}.log"
	timeout 200 $V/torchrun --nproc-per-node 1 --master-port $port docs/benchmarks/torch-cuda-check.py "$b" >"$f" 2>&1 || rc=1
	echo "== CUDA tensors, W=1, backend $b: $(tail -1 "$f")"
done
for w in ${WORLDS:-1 2 4}; do
	for s in ${SUITES:-main premul ddp faults}; do
		port=$((port + 1))
		f="$OUT/cpu-w$w-$s.log"
		timeout 240 $V/torchrun --nproc-per-node $w --master-port $port python/tests/torch_backend_check.py "$s" >"$f" 2>&1 || { rc=1; echo "!! W=$w $s failed:"; grep -v '^\s*$' "$f" | tail -6; }
		echo "== CPU tensors, W=$w, suite $s: $(grep -E '^ok |digest|passed' "$f" | tail -2 | tr '\n' ' ')"
	done
done
(cd "$OUT" && tar czf logs.tar.gz *.log *.txt 2>/dev/null && rm -f *.log)
exit $rc
