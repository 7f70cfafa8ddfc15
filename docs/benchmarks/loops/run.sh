#!/usr/bin/env bash
# docs/benchmarks/loops/run.sh: for each size, R interleaved rounds of
# detcoll's loop over shared memory as it is ("exposed": peers' buffers read
# where the transport can), the same with DETCOLL_SHM_DIRECT_BYTES=-1
# ("window": no direct reads, no exposures) and Open MPI's vader
# (mpi_bench), fp32; prints the median of the rounds' medians and each
# round's (through ab.sh, with A the exposed and B the window form).
#
#   OP=ag W=2 SIZES="65536 1048576" R=3 bash docs/benchmarks/loops/run.sh
#
# From the repository root; DETCOLL (bin/detcoll), LOOPS (bin/loops) and
# MPI_BENCH (/tmp/mpi_bench) are built when absent. docs/shm.md,
# "AllGather from exposed buffers", has what it measured.
set -euo pipefail
OP=${OP:-ag}; W=${W:-2}; R=${R:-3}; SIZES=${SIZES:-"65536 262144 1048576"}
DETCOLL=${DETCOLL:-bin/detcoll}; LOOPS=${LOOPS:-bin/loops}
[ -x "$DETCOLL" ] || go build -o "$DETCOLL" ./cmd/detcoll
[ -x "$LOOPS" ] || go build -o "$LOOPS" ./docs/benchmarks/loops
for n in $SIZES; do
	A="$LOOPS" A_NAME=exposed B="$LOOPS" B_NAME=window B_ENV=DETCOLL_SHM_DIRECT_BYTES=-1 \
		WS="$W" OPS="$OP" SIZES="$n" R="$R" ITERS=$((n >= 1048576 ? 50 : 200)) DETCOLL="$DETCOLL" \
		bash "$(dirname "$0")/ab.sh"
done
