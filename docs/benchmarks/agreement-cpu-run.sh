#!/bin/bash
# CPU seconds (user+sys, /usr/bin/time) of a fixed number of validated calls,
# before (e076ef6) vs after the agreement work, interleaved per case; the
# binaries are built as agreement-run.sh says. Output: $OUT/res.txt with
# "version case calls user-seconds sys-seconds" per run.
set -u
BEFORE=${BEFORE:-/tmp/bench-before.test} AFTER=${AFTER:-/tmp/bench-after.test}
OUT=${OUT:-/tmp/agreement-cpu}; mkdir -p "$OUT"; : > "$OUT/res.txt"
for i in $(seq "${ROUNDS:-7}"); do
  for c in "inproc/Barrier 20000" "inproc/AllReduce-gather_tree-4096B 20000" "tcp/Barrier 6000" "tcp/AllReduce-gather_tree-4096B 6000" \
    "inproc/AllReduce-gather_tree-1048576B 400" "tcp/AllReduce-gather_tree-1048576B 150"; do
    set -- $c
    for v in before after; do
      bin=$BEFORE; [ $v = after ] && bin=$AFTER
      t=$( { /usr/bin/time -f "%U %S" "$bin" -test.run '^$' -test.bench "^BenchmarkCollective\$/^${1%%/*}\$/^${1#*/}\$" \
        -test.benchtime "${2}x" -test.count 1 >/dev/null; } 2>&1 | tail -1)
      echo "$v $1 $2 $t" >> "$OUT/res.txt"
    done
  done
done
