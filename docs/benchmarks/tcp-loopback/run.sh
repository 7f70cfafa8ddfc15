#!/usr/bin/env bash
# docs/benchmarks/tcp-loopback/run.sh: forced-TCP detcoll with and without
# payload checksums on loopback (DETCOLL_TCP_CHECKSUM=always / auto) against
# Open MPI over TCP (btl self,tcp), interleaved per round, fp32, the three
# collectives, then one table of medians (min–max) over every sample.
#
#   bash docs/benchmarks/tcp-loopback/run.sh [OUTDIR]      # from the repository root
#
# Knobs: ROUNDS (3), WORLDS ("2 4"), SIZES (bytes per rank), ITERS (5),
# SAMPLES (3).
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${1:-/tmp/detcoll-tcp-loopback}
ROUNDS=${ROUNDS:-3}
WORLDS=${WORLDS:-"2 4"}
SIZES=${SIZES:-"4096 65536 1048576 4194304 16777216 67108864"}
ITERS=${ITERS:-5}
SAMPLES=${SAMPLES:-3}
. docs/benchmarks/peers/build.sh
{
	echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!docs/benchmarks' || echo ' (+ uncommitted changes)')"
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) logical cores, $(uname -sr)"
	echo "command: ROUNDS=$ROUNDS WORLDS='$WORLDS' SIZES='$SIZES' ITERS=$ITERS SAMPLES=$SAMPLES bash docs/benchmarks/tcp-loopback/run.sh"
	echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$OUT/meta.txt"
cat "$OUT/meta.txt"
csv=$(echo $SIZES | tr ' ' ',')
for ((round = 1; round <= ROUNDS; round++)); do
	for w in $WORLDS; do
		for peer in always auto mpi; do
			echo "== round $round W=$w $peer"
			if [ $peer = mpi ]; then
				"${MPIRUN[@]}" "$w" "${MPIOPT[@]}" --mca btl self,tcp "$OUT/mpi_bench" -n mpi_tcp \
					-i "$ITERS" -s "$SAMPLES" -w 2 $SIZES >"$OUT/raw/mpi-w$w-r$round.jsonl"
			else
				DETCOLL_TRANSPORT=tcp DETCOLL_TCP_CHECKSUM=$peer "$OUT/detcoll" bench --device cpu --nproc-per-node "$w" \
					--dtype fp32 --algorithms auto --size-bytes "$csv" --iterations "$ITERS" --samples "$SAMPLES" \
					--warmup 2 --output "$OUT/raw/$peer-w$w-r$round.json" >"$OUT/raw/$peer-w$w-r$round.log" 2>&1
			fi
		done
	done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.txt"
python3 docs/benchmarks/tcp-loopback/table.py "$OUT"
