#!/usr/bin/env bash
# docs/benchmarks/loops/run.sh: for each size, R interleaved rounds of
# detcoll's loop over shared memory as it is ("exposed": peers' buffers read
# where the transport can), the same with DETCOLL_SHM_DIRECT_BYTES=-1
# ("window": no direct reads, no exposures) and Open MPI's vader
# (mpi_bench), fp32; prints the median of the rounds' medians and the range.
#
#   OP=ag W=2 SIZES="65536 1048576" R=3 bash docs/benchmarks/loops/run.sh
#
# From the repository root; DETCOLL (bin/detcoll), LOOPS (bin/loops) and
# MPI_BENCH (/tmp/mpi_bench) are built when absent. docs/shm.md,
# "AllGather from exposed buffers", has what it measured.
set -euo pipefail
OP=${OP:-ag}; W=${W:-2}; R=${R:-3}; SIZES=${SIZES:-"65536 262144 1048576"}
DETCOLL=${DETCOLL:-bin/detcoll}; LOOPS=${LOOPS:-bin/loops}; MPI_BENCH=${MPI_BENCH:-/tmp/mpi_bench}
[ -x "$DETCOLL" ] || go build -o "$DETCOLL" ./cmd/detcoll
[ -x "$LOOPS" ] || go build -o "$LOOPS" ./docs/benchmarks/loops
[ -x "$MPI_BENCH" ] || mpicc -O2 -o "$MPI_BENCH" docs/benchmarks/peers/mpi_bench.c
MPIRUN=(mpirun -np)
if [ "$(id -u)" = 0 ]; then MPIRUN=(mpirun --allow-run-as-root -np); fi
mop=all_gather; [ "$OP" = ar ] && mop=all_reduce; [ "$OP" = rs ] && mop=reduce_scatter
loop() { N=$1 ITERS=$2 OP=$OP "$DETCOLL" launch --nproc-per-node "$W" "$LOOPS" 2>&1 | awk '/median/{print $(NF-5)}'; }
for n in $SIZES; do
	it=$((n >= 1048576 ? 50 : 200))
	a=() b=() c=()
	for ((r = 0; r < R; r++)); do
		a+=("$(loop "$n" "$it")")
		b+=("$(DETCOLL_SHM_DIRECT_BYTES=-1 loop "$n" "$it")")
		c+=("$("${MPIRUN[@]}" "$W" --oversubscribe --bind-to none --mca btl self,vader "$MPI_BENCH" -n mpi -i "$it" -s 7 -w 50 -o "$mop" -d fp32 "$n" 2>/dev/null |
			python3 -c 'import json,sys,statistics as s; print(s.median(json.loads(sys.stdin.readline())["samples_us"]))')")
	done
	python3 - "$OP" "$W" "$n" "${a[*]}" "${b[*]}" "${c[*]}" <<'PY'
import statistics as s, sys
op, w, n = sys.argv[1:4]
cols = [[float(x) for x in v.split()] for v in sys.argv[4:7]]
m = [s.median(c) for c in cols]
rng = " ".join(f"[{min(c):.0f}-{max(c):.0f}]" for c in cols)
print(f"W={w} {op} {n} exposed {m[0]:.1f} window {m[1]:.1f} vader {m[2]:.1f} {rng}  exposed/vader {m[0]/m[2]:.2f} window/vader {m[1]/m[2]:.2f}")
PY
done
