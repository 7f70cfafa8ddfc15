#!/bin/bash
# Interleaved W=2 loopback measurement behind docs/benchmarks/tcp-lean-2026-12-01.md:
# detcoll AllReduce fp32 (before = main at e076ef6, after = this tree, commx =
# this tree plus the comm.go hook in tcp-lean-comm-exchange.patch), the
# transport's exchange step three ways, and Open MPI 4.1 over TCP
# (--mca btl tcp,self). Run from the repository root; needs mpicc/mpirun.
#   bash docs/benchmarks/tcp-lean-run.sh [rounds] > results.txt
set -euo pipefail
rounds=${1:-5}
root=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GOFLAGS=-buildvcs=false
mkdir -p "$work/before" "$work/after" "$work/commx"
git archive e076ef6 | tar -x -C "$work/before"
git archive HEAD | tar -x -C "$work/after"
git archive HEAD | tar -x -C "$work/commx"
(cd "$work/commx" && patch -p1 -s < "$root/docs/benchmarks/tcp-lean-comm-exchange.patch")
for v in before after commx; do
  mkdir -p "$work/$v/transport/tcp/internal/leanbench"
  cp transport/tcp/internal/leanbench/*.go "$work/$v/transport/tcp/internal/leanbench/"
  tags=""; [ $v = before ] && tags="-tags noexchange"
  (cd "$work/$v" && go build $tags -o "$work/lean.$v" ./transport/tcp/internal/leanbench)
done
mpicc -O2 -o "$work/mpi_allreduce" docs/benchmarks/mpi_allreduce.c
run2() { # build mode bytes iters samples
  local port=$((20000 + RANDOM % 20000)) p
  "$work/lean.$1" -rank 1 -store 127.0.0.1:$port -mode "$2" -bytes "$3" -iters "$4" -samples "$5" -prefix "r$RANDOM" & p=$!
  "$work/lean.$1" -rank 0 -store 127.0.0.1:$port -mode "$2" -bytes "$3" -iters "$4" -samples "$5" -prefix "r$RANDOM"
  wait $p
}
for round in $(seq "$rounds"); do
  for sz in 4096 1048576 67108864; do
    case $sz in 4096) it=2000; sa=5;; 1048576) it=100; sa=5;; *) it=5; sa=3;; esac
    for b in before after commx; do echo "round=$round build=$b $(run2 $b comm $sz $it $sa)"; done
    if [ $sz = 4096 ]; then
      for bm in before:xchgdl after:xchgdl after:tcpxdl before:seqdl after:seqdl; do
        echo "round=$round build=${bm%%:*} $(run2 ${bm%%:*} ${bm##*:} $sz $it $sa)"
      done
    fi
    echo "round=$round build=mpi $(mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl tcp,self "$work/mpi_allreduce" $sz 2>&1 | grep W=)"
  done
  echo "round=$round load=$(cut -d' ' -f1-3 /proc/loadavg)"
done
