#!/usr/bin/env bash
# docs/benchmarks/peers/run.sh: detcoll (shared memory and forced TCP), Open
# MPI (shared memory: btl self,vader; TCP: btl self,tcp) and torch Gloo side
# by side on this host: AllReduce, AllGather, ReduceScatter, fp32 and bf16,
# the same per-rank sizes and world sizes, interleaved (each round runs every
# peer once per W, in a rotated order), then one table, a plot and JSON.
#
#   bash docs/benchmarks/peers/run.sh [OUTDIR]          # from the repository root
#
# Knobs (environment): ROUNDS (3), WORLDS ("2 4"), SMALL sizes ("4096 16384
# 65536" bytes, ITERS_SMALL iterations per sample, 20, after WARMUP_SMALL
# warm-up iterations, 200), MEDIUM sizes ("262144 1048576", ITERS_MEDIUM,
# 20, WARMUP_MEDIUM, 20), LARGE sizes ("4194304 16777216 67108864",
# ITERS_LARGE, 3, WARMUP_LARGE, 2), SAMPLES per run (3), PEERS (all five),
# NAME (the stem of the committed files, peers-cpu-<date>), PY (the Python
# with torch, /usr/bin/python3), TIMEOUT (seconds for one peer's run of one
# size group, 1200). On a host without Go or Open MPI (the GPU machine):
# DETCOLL_BIN (a prebuilt detcoll, used instead of building one), COMMIT
# (what it was built from), PEERS without the mpi ones and GLOO_UNSUPPORTED
# (ops or dtypes that torch's Gloo lacks there, for gloo_bench.py
# --unsupported); the raw files are then collected on a machine with Go
# (the last line says how). Sizes are detcoll's input_bytes per rank (see
# mpi_bench.c). The median, min and max of a row are over every sample of
# every round. detcoll rows are its `auto` algorithm.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROOT=$PWD
DATE=$(date -u +%Y-%m-%d)
OUT=${1:-/tmp/detcoll-peers-$DATE}
ROUNDS=${ROUNDS:-3}
WORLDS=${WORLDS:-"2 4"}
SMALL=${SMALL:-"4096 16384 65536"}
MEDIUM=${MEDIUM:-"262144 1048576"}
LARGE=${LARGE:-"4194304 16777216 67108864"}
ITERS_SMALL=${ITERS_SMALL:-20}
# 200 warm-up iterations below 64 KiB, as the OSU micro-benchmarks skip
# for small messages: with 2 the first samples of a row can fall in the
# ms after the previous row, while the OS still runs both ranks on one
# core (docs/shm.md, "Placement after a pause"), for every peer alike.
WARMUP_SMALL=${WARMUP_SMALL:-200}
# 256 KiB and 1 MiB had 3 iterations per sample until 2026-12-03: a
# sample of 0.1–0.5 ms, so one scheduler hiccup on this 2-core machine
# decided a row, for every peer alike (docs/benchmarks/peers-cpu-2026-12-03d.md
# against e.md).
ITERS_MEDIUM=${ITERS_MEDIUM:-20}
WARMUP_MEDIUM=${WARMUP_MEDIUM:-20}
WARMUP_LARGE=${WARMUP_LARGE:-2}
ITERS_LARGE=${ITERS_LARGE:-3}
SAMPLES=${SAMPLES:-3}
PEERS=${PEERS:-"detcoll_shm detcoll_tcp mpi_shm mpi_tcp gloo"}
NAME=${NAME:-peers-cpu-$DATE}
PY=${PY:-/usr/bin/python3}
TIMEOUT=${TIMEOUT:-1200}

. docs/benchmarks/peers/build.sh

{
	if [ -n "${COMMIT:-}" ]; then
		echo "commit: $COMMIT"
	else
		echo "commit: $(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!docs/benchmarks' || echo ' (+ uncommitted changes)')"
	fi
	echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
	echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) logical cores, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -sr)"
	echo "go: $(go version 2>/dev/null | cut -d' ' -f3 || true); open mpi: $(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}' || true); torch: $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null || true)"
	echo "command: ROUNDS=$ROUNDS WORLDS='$WORLDS' SMALL='$SMALL' MEDIUM='$MEDIUM' LARGE='$LARGE' ITERS_SMALL=$ITERS_SMALL ITERS_MEDIUM=$ITERS_MEDIUM ITERS_LARGE=$ITERS_LARGE WARMUP_SMALL=$WARMUP_SMALL WARMUP_MEDIUM=$WARMUP_MEDIUM WARMUP_LARGE=$WARMUP_LARGE SAMPLES=$SAMPLES bash docs/benchmarks/peers/run.sh"
	echo "load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$OUT/meta.txt"
cat "$OUT/meta.txt"

port=29600
run_peer() { # peer W group iters warmup sizes...
	local peer=$1 w=$2 group=$3 iters=$4 warmup=$5
	shift 5
	local sizes_csv
	sizes_csv=$(echo "$@" | tr ' ' ',')
	local tag="$peer-w$w-$group-r$round"
	case $peer in
	detcoll_shm | detcoll_tcp)
		for dt in fp32 bf16; do
			DETCOLL_TRANSPORT=${peer#detcoll_} timeout "$TIMEOUT" "$OUT/detcoll" bench --device cpu --nproc-per-node "$w" \
				--dtype "$dt" --algorithms auto --size-bytes "$sizes_csv" --iterations "$iters" --samples "$SAMPLES" \
				--warmup "$warmup" --output "$OUT/raw/$tag-$dt.detcoll.json" >"$OUT/raw/$tag-$dt.log" 2>&1 ||
				echo "!! $tag $dt failed (see $OUT/raw/$tag-$dt.log)"
		done
		;;
	mpi_shm | mpi_tcp)
		local btl=self,vader
		[ "$peer" = mpi_tcp ] && btl=self,tcp
		timeout "$TIMEOUT" "${MPIRUN[@]}" "$w" "${MPIOPT[@]}" --mca btl "$btl" "$OUT/mpi_bench" -n "$peer" \
			-i "$iters" -s "$SAMPLES" -w "$warmup" "$@" >"$OUT/raw/$tag.jsonl" 2>"$OUT/raw/$tag.log" ||
			echo "!! $tag failed (see $OUT/raw/$tag.log)"
		;;
	gloo)
		port=$((port + 1))
		local pids=()
		for ((r = 0; r < w; r++)); do
			RANK=$r WORLD_SIZE=$w MASTER_ADDR=127.0.0.1 MASTER_PORT=$port OMP_NUM_THREADS=1 \
				timeout "$TIMEOUT" $PY docs/benchmarks/peers/gloo_bench.py --name gloo --iters "$iters" \
				--samples "$SAMPLES" --warmup "$warmup" --unsupported "${GLOO_UNSUPPORTED:-}" "$@" >"$OUT/raw/$tag.rank$r.jsonl" 2>"$OUT/raw/$tag.rank$r.log" &
			pids+=($!)
		done
		for p in "${pids[@]}"; do wait "$p" || echo "!! $tag failed (see $OUT/raw/$tag.rank*.log)"; done
		mv "$OUT/raw/$tag.rank0.jsonl" "$OUT/raw/$tag.jsonl"
		rm -f "$OUT/raw/$tag".rank*.jsonl
		;;
	esac
}

read -r -a peers <<<"$PEERS"
for ((round = 1; round <= ROUNDS; round++)); do
	for w in $WORLDS; do
		# Rotate the order every round so no peer always runs first (or
		# right after the same neighbour).
		n=${#peers[@]}
		for ((k = 0; k < n; k++)); do
			peer=${peers[$(((k + round) % n))]}
			echo "== round $round W=$w $peer ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))"
			run_peer "$peer" "$w" small "$ITERS_SMALL" "$WARMUP_SMALL" $SMALL
			run_peer "$peer" "$w" medium "$ITERS_MEDIUM" "$WARMUP_MEDIUM" $MEDIUM
			run_peer "$peer" "$w" large "$ITERS_LARGE" "$WARMUP_LARGE" $LARGE
		done
	done
done
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/meta.txt"

if ! command -v go >/dev/null; then
	echo "no Go here: collect with  go run ./docs/benchmarks/peers/collect -in $OUT/raw -meta $OUT/meta.txt -out docs/benchmarks/$NAME"
	exit 0
fi
go run ./docs/benchmarks/peers/collect -in "$OUT/raw" -meta "$OUT/meta.txt" -out "docs/benchmarks/$NAME"
echo "wrote docs/benchmarks/$NAME.{md,json,png}"
