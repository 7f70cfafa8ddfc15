#!/bin/bash
# Before/after comparison of the agreement work (docs/benchmarks/agreement-2026-12-01.md).
# BEFORE and AFTER are root-package test binaries built with bench_test.go:
#   before: git archive e076ef6 | tar -x -C /tmp/agree-base; cp bench_test.go /tmp/agree-base/
#           (cd /tmp/agree-base && go test -c -o /tmp/bench-before.test .)
#   after:  go test -c -o /tmp/bench-after.test .
# Each round runs every case once with each binary, alternating, so that the
# load of a shared machine falls on both alike.
set -eu
BEFORE=${BEFORE:-/tmp/bench-before.test} AFTER=${AFTER:-/tmp/bench-after.test}
ROUNDS=${ROUNDS:-9} OUT=${OUT:-/tmp/agreement-bench}
mkdir -p "$OUT"; : > "$OUT/before.txt"; : > "$OUT/after.txt"
cases="inproc/Barrier inproc/AllReduce-gather_tree-4096B inproc/AllReduce-a2a_tree-4096B
inproc/AllReduce-gather_tree-1048576B inproc/AllReduce-a2a_tree-1048576B tcp/Barrier
tcp/AllReduce-gather_tree-4096B tcp/AllReduce-a2a_tree-4096B tcp/AllReduce-gather_tree-1048576B
tcp/AllReduce-a2a_tree-1048576B"
for i in $(seq "$ROUNDS"); do
  for c in $cases; do
    for v in before after; do
      bin=$BEFORE; [ $v = after ] && bin=$AFTER
      "$bin" -test.run '^$' -test.bench "^BenchmarkCollective\$/^${c%%/*}\$/^${c#*/}\$" \
        -test.benchtime 0.2s -test.count 1 | grep '^Benchmark' >> "$OUT/$v.txt"
    done
  done
done
