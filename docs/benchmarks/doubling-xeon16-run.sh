#!/bin/bash
# Recursive doubling (the new Auto of small AllReduce and AllGather over
# messages at W ≥ 4) against the build before it and Open MPI over TCP, on
# the GPU machine's 16-core host: forced TCP, W = 4, 8, 16, interleaved
# rounds. Run from the repository root with the two builds in bin/:
#   OLD=bin/detcoll-base NEW=bin/detcoll bash docs/benchmarks/doubling-xeon16-run.sh
# It prints one line per figure (build W op dtype bytes median-µs) and
# writes them to $OUT/doubling.txt.
set -u
OUT=${OUT:-/tmp/doubling-out}
OLD=${OLD:-bin/detcoll-base}
NEW=${NEW:-bin/detcoll}
ROUNDS=${ROUNDS:-3}
WORLDS=${WORLDS:-4 8 16}
SIZES=${SIZES:-4096,16384,65536}
DTYPES=${DTYPES:-fp32 bf16}
mkdir -p "$OUT"
mpicc -O2 -o /tmp/mpi_bench docs/benchmarks/peers/mpi_bench.c || exit 1
{
  echo "# commit new: $($NEW --version 2>&1 | head -1)"
  echo "# commit old: $($OLD --version 2>&1 | head -1)"
  echo "# host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "# load at start: $(cat /proc/loadavg)"
} | tee "$OUT/doubling.txt"
for round in $(seq "$ROUNDS"); do
  for W in $WORLDS; do
    for dt in $DTYPES; do
      for b in old new; do
        bin=$OLD
        [ $b = new ] && bin=$NEW
        DETCOLL_TRANSPORT=tcp timeout 300 $bin bench --device cpu --nproc-per-node "$W" --dtype "$dt" --algorithms auto \
          --size-bytes "$SIZES" --iterations 20 --samples 9 --warmup 200 --operations all_reduce,all_gather --output "" 2>&1 |
          awk -v b=$b -v w="$W" -v r="$round" '$1=="[rank" && $5=="auto" {print r, b, w, $3, $4, $6$7, $8}'
      done
      timeout 300 mpirun --allow-run-as-root -np "$W" --oversubscribe --bind-to none --mca btl self,tcp \
        /tmp/mpi_bench -n mpi -i 20 -s 9 -w 200 -o all_reduce,all_gather -d "$dt" ${SIZES//,/ } 2>/dev/null |
        python3 -c '
import sys, json, statistics
for l in sys.stdin:
    if l.startswith("{"):
        j = json.loads(l)
        print(sys.argv[1], "mpi", j["world_size"], j["op"], j["dtype"], "%dKiB" % (j["bytes"] // 1024), "%.1f" % statistics.median(j["samples_us"]))
' "$round"
    done
  done
done | tee -a "$OUT/doubling.txt"
echo "# load at end: $(cat /proc/loadavg)" | tee -a "$OUT/doubling.txt"
