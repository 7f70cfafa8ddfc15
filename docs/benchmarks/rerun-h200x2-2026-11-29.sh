set -u
export NCCL_NVLS_ENABLE=0
W=$(mktemp -d)
mkdir -p $W/pytorch
timeout 100 env OUT=$W/pytorch BUDGET=90 T_RUN=40 GO_BENCH=0 bash docs/benchmarks/pytorch-h200x2-run.sh > $W/pytorch.txt 2>&1
echo "pytorch rc=$?" >> $W/pytorch.txt
timeout 60 bin/detcoll launch --standalone --nproc-per-node 2 -- bin/detcoll bench --device cuda --operations reduce_scatter all_reduce --algorithms auto --size-bytes 4096 1048576 16777216 --warmup 20 --iterations 100 --samples 10 --output $W/auto.json > $W/auto.txt 2>&1
echo "bench rc=$?" >> $W/auto.txt
tar czf $OUT/rerun.tgz -C $W .
grep -E "per call|checks" $W/pytorch/summary.md; grep -vE "bench:" $W/auto.txt | tail -12
