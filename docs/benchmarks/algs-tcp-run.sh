#!/bin/bash
# Algorithms side by side over forced TCP on this host, against Open MPI
# over TCP, interleaved rounds: one build, each algorithm forced with
# --algorithms, and mpi_bench (docs/benchmarks/peers/mpi_bench.c) in the
# same round. Run from the repository root after `make detcoll`:
#   ROUNDS=3 WORLDS=4 OPS=reduce_scatter ALGS=recursive_doubling,halving_doubling,a2a_tree \
#     bash docs/benchmarks/algs-tcp-run.sh
# Every line is one figure (round algorithm W op dtype size median-µs); the
# last lines are the table of medians over the rounds (min–max). The
# script stops if a detcoll row is not repeat- and oracle-bitwise.
set -u
OUT=${OUT:-/tmp/algs-tcp-out}
BIN=${BIN:-bin/detcoll}
ROUNDS=${ROUNDS:-3}
WORLDS=${WORLDS:-4}
SIZES=${SIZES:-4096,16384,65536,262144,1048576,4194304}
DTYPES=${DTYPES:-fp32 bf16}
OPS=${OPS:-reduce_scatter}
ALGS=${ALGS:-recursive_doubling,halving_doubling,a2a_tree}
ITERS=${ITERS:-20}
SAMPLES=${SAMPLES:-5}
WARMUP=${WARMUP:-50}
mkdir -p "$OUT"
mpicc -O2 -o /tmp/mpi_bench docs/benchmarks/peers/mpi_bench.c || exit 1
{
  echo "# commit: $($BIN --version 2>&1 | head -1)"
  echo "# host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
  echo "# command: ROUNDS=$ROUNDS WORLDS='$WORLDS' SIZES=$SIZES DTYPES='$DTYPES' OPS=$OPS ALGS=$ALGS ITERS=$ITERS SAMPLES=$SAMPLES WARMUP=$WARMUP bash docs/benchmarks/algs-tcp-run.sh"
  echo "# load at start: $(cat /proc/loadavg)"
} | tee "$OUT/algs.txt"
for round in $(seq "$ROUNDS"); do
  for W in $WORLDS; do
    for dt in $DTYPES; do
      DETCOLL_TRANSPORT=tcp timeout 600 $BIN bench --device cpu --nproc-per-node "$W" --dtype "$dt" --algorithms "$ALGS" \
        --size-bytes "$SIZES" --iterations "$ITERS" --samples "$SAMPLES" --warmup "$WARMUP" --operations "$OPS" \
        --output "$OUT/r$round-w$W-$dt.json" >"$OUT/r$round-w$W-$dt.log" 2>&1 || { echo "bench failed"; tail "$OUT/r$round-w$W-$dt.log"; exit 1; }
      python3 - "$OUT/r$round-w$W-$dt.json" "$round" "$W" <<'PY' || exit 1
import json, sys
d = json.load(open(sys.argv[1]))
for r in d["rows"]:
    if not (r["repeat_bitwise"] and r["oracle_bitwise"]):
        sys.exit("not bitwise: %s %s %s" % (r["operation"], r["algorithm"], r["input_bytes"]))
    print(sys.argv[2], r["algorithm"], sys.argv[3], r["operation"], r["dtype"], r["input_bytes"], "%.1f" % r["deterministic"]["median_us"])
PY
      timeout 600 mpirun --allow-run-as-root -np "$W" --oversubscribe --bind-to none --mca btl self,tcp \
        /tmp/mpi_bench -n mpi -i "$ITERS" -s "$SAMPLES" -w "$WARMUP" -o "$OPS" -d "$dt" ${SIZES//,/ } 2>/dev/null |
        python3 -c '
import sys, json, statistics
for l in sys.stdin:
    if l.startswith("{"):
        j = json.loads(l)
        print(sys.argv[1], "open_mpi_tcp", j["world_size"], j["op"], j["dtype"], j["bytes"], "%.1f" % statistics.median(j["samples_us"]))
' "$round"
    done
  done
done | tee -a "$OUT/algs.txt"
echo "# load at end: $(cat /proc/loadavg)" | tee -a "$OUT/algs.txt"
python3 - "$OUT/algs.txt" <<'PY'
import sys, statistics, collections
rows = collections.defaultdict(list)
for l in open(sys.argv[1]):
    if l.startswith("#"):
        continue
    f = l.split()
    rows[(int(f[2]), f[3], f[4], int(f[5]))].append((f[1], float(f[6])))
names = []
for v in rows.values():
    for n, _ in v:
        if n not in names:
            names.append(n)
print("\n| W | op | dtype | bytes | " + " | ".join(names) + " |")
print("|---|---|---|---|" + "---|" * len(names))
for k in sorted(rows):
    cells = []
    for n in names:
        xs = [x for m, x in rows[k] if m == n]
        cells.append("%.1f (%.1f–%.1f)" % (statistics.median(xs), min(xs), max(xs)) if xs else "—")
    print("| %d | %s | %s | %s | %s |" % (k[0], k[1], k[2], "%d KiB" % (k[3] // 1024), " | ".join(cells)))
PY
