#!/usr/bin/env bash
# detcoll from PyTorch on two H200s: docs/benchmarks/pytorch_check.py (bit-exact
# all_reduce / all_gather / reduce_scatter of CUDA tensors against the host
# oracle, timing against torch.distributed's NCCL, the Python per-call cost),
# run twice: under torchrun and under detcoll launch. Then, if time is left,
# the Go path (detcoll bench --device cuda) at the same sizes for comparison.
#
# Run from the repository root on the GPU machine, with bin/ built on the CPU
# machine and carried:
#
#   CGO_ENABLED=1 go build -buildmode=c-shared -o bin/libdetcoll.so ./capi
#   CGO_ENABLED=1 go build -o bin/detcoll ./cmd/detcoll
#   OUT=/some/dir bash docs/benchmarks/pytorch-h200x2-run.sh
#
# Writes everything under $OUT (default ./out): one folder per run
# (results.json, results.md, small dumps, per-rank logs in <run>.log),
# machine.txt, steps.txt, summary.md; large dumps are checked on the machine
# and deleted (their SHA-256 stay in results.json; KEEP_DUMPS=1 keeps them).
# Every step runs even if an earlier one failed, each under `timeout`; the
# whole script stays under BUDGET seconds (default 140). The summary table is
# printed last. Exit status 0 when both runs passed every check.
#
# Knobs: VENV (default /opt/torch/.venv), BUDGET, T_RUN (seconds per run,
# default 50), GO_BENCH=0 to skip the Go bench, KEEP_DUMPS=1, CHECK_ARGS
# (more arguments for pytorch_check.py; "--cpu --quick" is a dry run of this
# script on a machine without a GPU).
set -u -o pipefail
cd "$(dirname "$0")/../.." || exit 2
ROOT=$PWD
OUT=${OUT:-./out}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd) || exit 2
VENV=${VENV:-/opt/torch/.venv}
PY=$VENV/bin/python
TORCHRUN=$VENV/bin/torchrun
BUDGET=${BUDGET:-140}
T_RUN=${T_RUN:-50}
GO_BENCH=${GO_BENCH:-1}
CHECK=docs/benchmarks/pytorch_check.py
read -r -a EXTRA <<< "${CHECK_ARGS:-}"
[ -n "${KEEP_DUMPS:-}" ] && EXTRA+=(--keep-dumps)

export NCCL_NVLS_ENABLE=0 # never NVLink multicast (GPU.md)
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH}
export DETCOLL_LIB=$ROOT/bin/libdetcoll.so
export DETCOLL_INIT_TIMEOUT=${DETCOLL_INIT_TIMEOUT:-60s}
export DETCOLL_TIMEOUT=${DETCOLL_TIMEOUT:-60s}
export DETCOLL_CACHE_DIR=${DETCOLL_CACHE_DIR:-/tmp/detcoll-kernel-cache} # NVRTC's, shared by the runs
export PYTHONUNBUFFERED=1
export PYTHONFAULTHANDLER=1
unset DETCOLL_STORE_ADDR DETCOLL_STORE_PORT DETCOLL_RANK DETCOLL_WORLD_SIZE RANK WORLD_SIZE MASTER_ADDR MASTER_PORT

: > "$OUT/steps.txt"
rc=0
# step NAME SECONDS COMMAND...: runs COMMAND under timeout, output to
# $OUT/NAME.log, and records its exit status and duration.
step() {
	local name=$1 t=$2
	shift 2
	local start=$SECONDS
	echo "== $name (timeout ${t}s): $*"
	timeout -k 15 "$t" "$@" > "$OUT/$name.log" 2>&1
	local s=$?
	local line
	line=$(printf '%-16s exit %-3s %4ss' "$name" "$s" "$((SECONDS - start))")
	[ "$s" -eq 124 ] && line+="  (TIMED OUT)"
	echo "$line" | tee -a "$OUT/steps.txt"
	if [ "$s" -ne 0 ]; then
		rc=1
		tail -n 15 "$OUT/$name.log" | sed 's/^/    /'
	fi
	return 0
}

for f in bin/detcoll bin/libdetcoll.so "$PY" "$TORCHRUN" "$CHECK"; do
	[ -e "$f" ] || { echo "missing $f" | tee -a "$OUT/steps.txt"; rc=1; }
done

{
	date -u
	uname -a
	nvidia-smi -L
	nvidia-smi topo -m
	nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
	nproc
	"$PY" -c 'import sys, torch; print(sys.version); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
	ldconfig -p | grep -E 'libnccl|libcuda.so|nvrtc'
	ls -la bin/detcoll bin/libdetcoll.so
	sha256sum bin/detcoll bin/libdetcoll.so
	env | grep -E '^(NCCL_|DETCOLL_|CUDA_)' | sort
} > "$OUT/machine.txt" 2>&1

step selftest 30 "$PY" "$CHECK" --self-test

# Run 1: torchrun (detcoll's store at MASTER_PORT+1, served by rank 0).
step torchrun "$T_RUN" "$TORCHRUN" --standalone --nproc-per-node 2 "$CHECK" \
	--out "$OUT/torchrun" --tag torchrun --watchdog $((T_RUN - 10)) "${EXTRA[@]}"

# Run 2: detcoll launch (the launcher serves detcoll's store; MASTER_PORT is torch's).
step detcoll-launch "$T_RUN" bin/detcoll launch --standalone --nproc-per-node 2 -- "$PY" "$CHECK" \
	--out "$OUT/detcoll-launch" --tag detcoll-launch --watchdog $((T_RUN - 10)) "${EXTRA[@]}"

for run in torchrun detcoll-launch; do
	f=$OUT/$run/results.json
	if [ -f "$f" ]; then
		"$PY" - "$f" <<'EOF' || rc=1
import json, sys
r = json.load(open(sys.argv[1]))
ok = bool(r.get("checks")) and all(c.get("ok") for c in r["checks"]) and all(s.get("ok") for s in r.get("steps", []))
sys.exit(0 if ok else 1)
EOF
	else
		rc=1
	fi
done

summarize() {
	local gb=()
	[ -f "$OUT/go-bench.json" ] && gb=(--go-bench "$OUT/go-bench.json")
	"$PY" "$CHECK" --summarize "$OUT/torchrun" "$OUT/detcoll-launch" "${gb[@]}" --summary-file "$OUT/summary.md" \
		> /dev/null 2> "$OUT/summary.err" || echo "(the summary failed: see summary.err)" > "$OUT/summary.md"
}
summarize # now, in case the Go bench is cut short

# The Go path at the same sizes up to 16 MiB (bf16, both algorithms; the
# summary shows the one Auto picks with two ranks), if the budget allows.
if [ "$GO_BENCH" = 1 ]; then
	left=$((BUDGET - SECONDS - 15)) # (timeout's kill grace)
	if [ "$left" -ge 25 ]; then
		keep_rc=$rc # supplementary: its failure does not fail the check
		step go-bench "$left" bin/detcoll launch --standalone --nproc-per-node 2 -- bin/detcoll bench --device cuda \
			--dtype bf16 --warmup 10 --iterations 50 --samples 5 --size-bytes 4096 1048576 16777216 \
			--output "$OUT/go-bench.json"
		rc=$keep_rc
		summarize
	else
		echo "go-bench         skipped: ${left}s left of BUDGET=${BUDGET}s" | tee -a "$OUT/steps.txt"
	fi
fi

echo
echo "== steps ($SECONDS s in all)"
cat "$OUT/steps.txt"
echo
cat "$OUT/summary.md"
exit $rc
