#!/bin/bash
# Which algorithm over forced TCP, by size, at W = 4, 8 and 16 on the
# 16-core host: the algorithms named in ALGS, with Open MPI over TCP in the
# same rounds. Prints "round build W op dtype bytes algorithm median-µs".
set -u
OUT=${OUT:-/tmp/doubling-out}
BIN=${BIN:-bin/detcoll}
ROUNDS=${ROUNDS:-3}
WORLDS=${WORLDS:-8 16}
SIZES=${SIZES:-65536,262144,1048576}
OPS=${OPS:-all_reduce}
ALGS=${ALGS:-gather_tree,a2a_tree,recursive_doubling}
mkdir -p "$OUT"
mpicc -O2 -o /tmp/mpi_bench docs/benchmarks/peers/mpi_bench.c || exit 1
echo "# $($BIN --version 2>&1 | head -1); load $(cat /proc/loadavg)" | tee "$OUT/sizes.txt"
for round in $(seq "$ROUNDS"); do
  for W in $WORLDS; do
    DETCOLL_TRANSPORT=tcp timeout 300 $BIN bench --device cpu --nproc-per-node "$W" --dtype fp32 \
      --algorithms "$ALGS" --size-bytes "$SIZES" --iterations 10 --samples 7 \
      --warmup 50 --operations "$OPS" --output "" 2>&1 |
      awk -v w="$W" -v r="$round" '$1=="[rank" && ($3=="all_reduce" || $3=="reduce_scatter") {print r, "new", w, $3, $4, $6$7, $5, $8}'
    timeout 300 mpirun --allow-run-as-root -np "$W" --oversubscribe --bind-to none --mca btl self,tcp \
      /tmp/mpi_bench -n mpi -i 10 -s 7 -w 50 -o "$OPS" -d fp32 ${SIZES//,/ } 2>/dev/null |
      python3 -c '
import sys, json, statistics
for l in sys.stdin:
    if l.startswith("{"):
        j = json.loads(l)
        b = j["bytes"]
        print(sys.argv[1], "mpi", j["world_size"], j["op"], j["dtype"], "%dMiB" % (b >> 20) if b >= 1 << 20 else "%dKiB" % (b >> 10), "mpi", "%.1f" % statistics.median(j["samples_us"]))
' "$round"
  done
done | tee -a "$OUT/sizes.txt"
