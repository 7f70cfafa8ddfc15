package bench

import (
	"bytes"
	"hash/crc32"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/reduce"
	"github.com/detcoll/detcoll/tree"
)

// checkRange is the element range of this rank's output that this rank
// compares with the oracle. all_reduce and all_gather outputs are the same
// on every rank (checked by hash), so each rank checks its shard; a
// reduce_scatter output is this rank's own and is checked whole.
func (r *runner) checkRange(spec CaseSpec) (lo, hi int) {
	n := spec.OutputBytes() / spec.DType.Size()
	if spec.Op == ReduceScatter {
		return 0, n
	}
	off, cnt := tree.Shard(n, r.w, r.rank)
	return off, off + cnt
}

// verifyBlock is the number of output elements one oracle task covers.
const verifyBlock = 1 << 14

// verifyOracle compares out's elements [lo, hi) with the reference computed
// from the regenerated inputs of every rank: reduce.Oracle for the
// reductions, the concatenation for all_gather. Blocks run in parallel.
func verifyOracle(spec CaseSpec, acc detcoll.Accumulate, out []byte, lo, hi int) (wrong int64, err error) {
	dt, w := spec.DType, spec.WorldSize
	sz := dt.Size()
	inCount := spec.InputBytes / sz
	outCount := spec.OutputBytes() / sz
	var (
		bad      atomic.Bool
		nwrong   atomic.Int64
		firstErr error
		errOnce  sync.Once
		next     atomic.Int64
		wg       sync.WaitGroup
	)
	next.Store(int64(lo))
	workers := min(runtime.GOMAXPROCS(0), (hi-lo+verifyBlock-1)/verifyBlock)
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inputs := make([][]byte, w)
			for p := range inputs {
				inputs[p] = make([]byte, verifyBlock*sz)
			}
			want := make([]byte, verifyBlock*sz)
			for !bad.Load() {
				b := int(next.Add(verifyBlock)) - verifyBlock
				if b >= hi {
					return
				}
				e := min(b+verifyBlock, hi)
				n := e - b
				wb := want[:n*sz]
				switch spec.Op {
				case AllGather:
					for j := b; j < e; {
						p, off := j/inCount, j%inCount
						k := min(e-j, inCount-off)
						FillInput(wb[(j-b)*sz:(j-b+k)*sz], dt, spec.Seed, p, off)
						j += k
					}
				default:
					base := b // all_reduce: output element j is input element j
					if spec.Op == ReduceScatter {
						base = spec.Rank*outCount + b
					}
					ins := make([][]byte, w)
					for p := range ins {
						ins[p] = inputs[p][:n*sz]
						FillInput(ins[p], dt, spec.Seed, p, base)
					}
					if err := reduce.Oracle(dt, acc, ins, wb); err != nil {
						errOnce.Do(func() { firstErr = err })
						bad.Store(true)
						return
					}
				}
				if got := out[b*sz : e*sz]; !bytes.Equal(wb, got) {
					k := int64(0)
					for i := 0; i < n; i++ {
						if !bytes.Equal(wb[i*sz:(i+1)*sz], got[i*sz:(i+1)*sz]) {
							k++
						}
					}
					nwrong.Add(k)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return 0, firstErr
	}
	return nwrong.Load(), nil
}

var crc32c = crc32.MakeTable(crc32.Castagnoli)

// hashBytes fingerprints an output for the cross-rank comparison: CRC-32C
// and CRC-32 (IEEE) side by side, both hardware-accelerated on common CPUs.
func hashBytes(b []byte) uint64 {
	return uint64(crc32.Checksum(b, crc32c))<<32 | uint64(crc32.ChecksumIEEE(b))
}
