# docs/benchmarks/peers/build.sh, sourced by the side-by-side benchmark scripts
# (peers/run.sh, tcp-loopback/run.sh) from the repository root with OUT set:
# builds detcoll and the Open MPI benchmark into $OUT and sets MPIRUN (with
# --allow-run-as-root for root) and MPIOPT (no binding, oversubscription
# allowed: the same placement rules as every other peer).
# DETCOLL_BIN, when set, is copied instead of building detcoll; Open MPI's
# benchmark is built only when PEERS (default: all) names an mpi peer.
export GOFLAGS=-buildvcs=false
mkdir -p "$OUT/raw"
if [ -n "${DETCOLL_BIN:-}" ]; then
	cp "$DETCOLL_BIN" "$OUT/detcoll"
else
	go build -o "$OUT/detcoll" ./cmd/detcoll
fi
case "${PEERS:-mpi}" in
*mpi*) mpicc -O2 -o "$OUT/mpi_bench" docs/benchmarks/peers/mpi_bench.c ;;
esac
MPIRUN=(mpirun -np)
if [ "$(id -u)" = 0 ]; then MPIRUN=(mpirun --allow-run-as-root -np); fi
MPIOPT=(--oversubscribe --bind-to none)
