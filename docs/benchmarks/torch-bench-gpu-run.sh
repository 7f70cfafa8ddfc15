#!/usr/bin/env bash
# The seed's benchmark as its users run it (issue 13 point 8), on the GPU
# machine's torch 2.x: detcoll's torch backend beside backend="nccl" on CUDA
# tensors, W = number of GPUs. From the repository root, bin/libdetcoll.so
# built on the CPU machine.
set -u -o pipefail
OUT=${OUT:-./out}
mkdir -p "$OUT"
V=${TORCH_VENV:-/opt/torch/.venv}/bin
W=$(nvidia-smi -L | wc -l)
export DETCOLL_LIB=$PWD/bin/libdetcoll.so PYTHONPATH=$PWD/python NCCL_NVLS_ENABLE=0
for dt in bf16 fp32; do
	timeout 280 $V/torchrun --nproc-per-node "$W" --master-port $((29800 + ${#dt})) -m detcoll.torch.bench \
		--device cuda --dtype $dt --operations all_reduce all_gather reduce_scatter \
		--size-bytes 4096 65536 1048576 16777216 --warmup 20 --iterations 100 --samples 10 \
		--output "$OUT/torch-bench-w$W-$dt.json" > "$OUT/torch-bench-w$W-$dt.log" 2>&1
	echo "== $dt rc=$?"; tail -16 "$OUT/torch-bench-w$W-$dt.log"
done
