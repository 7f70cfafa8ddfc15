#!/usr/bin/env bash
# docs/benchmarks/loops/ab.sh: two builds or settings of the loop program (A
# and B, e.g. before and after a change) and Open MPI (vader unless MPI_BTL
# says otherwise), interleaved: for each W, op and size, R rounds of A, B, MPI; prints each round's
# medians and the median of the rounds, fp32, µs per call.
#
#   A=bin/loops.old B=bin/loops WS="2 4" OPS="rs ar ag" SIZES="4096 65536" R=3 \
#     bash docs/benchmarks/loops/ab.sh
#
# From the repository root. A_ENV and B_ENV are environment assignments for
# one side (B_ENV=DETCOLL_SHM_DIRECT_BYTES=-1: the window instead of
# exposures), A_NAME and B_NAME its label. DETCOLL (launcher, default
# bin/detcoll) and MPI_BENCH (default /tmp/mpi_bench, built when absent).
# ITERS is the calls per sample (default 5000 below 64 KiB, 1000 below
# 1 MiB, 50 above). MPI_BTL picks Open MPI's transport (default self,vader;
# self,tcp with A_ENV=B_ENV=DETCOLL_TRANSPORT=tcp compares forced TCP).
set -euo pipefail
A=${A:?the first build}; B=${B:?the second build}
A_ENV=${A_ENV:-}; B_ENV=${B_ENV:-}; A_NAME=${A_NAME:-A}; B_NAME=${B_NAME:-B}
WS=${WS:-2}; OPS=${OPS:-"rs ar ag"}; SIZES=${SIZES:-"4096 65536"}; R=${R:-3}
DETCOLL=${DETCOLL:-bin/detcoll}; MPI_BENCH=${MPI_BENCH:-/tmp/mpi_bench}
MPI_BTL=${MPI_BTL:-self,vader}; MPI_NAME=${MPI_BTL#self,}
[ -x "$MPI_BENCH" ] || mpicc -O2 -o "$MPI_BENCH" docs/benchmarks/peers/mpi_bench.c
MPIRUN=(mpirun -np)
if [ "$(id -u)" = 0 ]; then MPIRUN=(mpirun --allow-run-as-root -np); fi
# loop BUILD ENV N ITERS OP W: rank 0's median sample.
loop() { env $2 N=$3 ITERS=$4 OP=$5 "$DETCOLL" launch --nproc-per-node "$6" "$1" 2>&1 | awk '/median/{print $(NF-5)}'; }
for w in $WS; do
	for op in $OPS; do
		mop=all_gather; [ "$op" = ar ] && mop=all_reduce; [ "$op" = rs ] && mop=reduce_scatter
		for n in $SIZES; do
			it=${ITERS:-$((n < 65536 ? 5000 : n < 1048576 ? 1000 : 50))}
			a=() b=() c=()
			for ((r = 0; r < R; r++)); do
				a+=("$(loop "$A" "$A_ENV" "$n" "$it" "$op" "$w")")
				b+=("$(loop "$B" "$B_ENV" "$n" "$it" "$op" "$w")")
				c+=("$("${MPIRUN[@]}" "$w" --oversubscribe --bind-to none --mca btl "$MPI_BTL" "$MPI_BENCH" -n mpi -i "$it" -s 7 -w 50 -o "$mop" -d fp32 "$n" 2>/dev/null |
					python3 -c 'import json,sys,statistics as s; print(s.median(json.loads(sys.stdin.readline())["samples_us"]))')")
			done
			python3 - "$op" "$w" "$n" "$A_NAME" "$B_NAME" "$MPI_NAME" "${a[*]}" "${b[*]}" "${c[*]}" <<'PY'
import statistics as s, sys
op, w, n, an, bn, mn = sys.argv[1:7]
cols = [[float(x) for x in v.split()] for v in sys.argv[7:10]]
m = [s.median(c) for c in cols]
rounds = " | ".join(" ".join(f"{x:.1f}" for x in c) for c in cols)
print(f"W={w} {op} {n}: {an} {m[0]:.1f} {bn} {m[1]:.1f} {mn} {m[2]:.1f}  {bn}/{an} {m[1]/m[0]:.2f} {bn}/{mn} {m[1]/m[2]:.2f} {an}/{mn} {m[0]/m[2]:.2f}  rounds {an}|{bn}|{mn}: {rounds}")
PY
		done
	done
done
