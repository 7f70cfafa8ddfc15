package reduce

import (
	"fmt"

	"github.com/detcoll/detcoll/dtype"
)

// RankMajor reduces w rank buffers stored one after another (rank 0's count
// elements, then rank 1's, …) and returns the count reduced elements. It is
// what `detcoll reduce` runs, for people who check their own kernels against
// detcoll. The result comes from the fast Reducer, which equals Oracle.
func RankMajor(dt dtype.DType, acc Accumulate, w int, data []byte) ([]byte, error) {
	if w < 1 {
		return nil, fmt.Errorf("%w: world size %d < 1", ErrArgs, w)
	}
	if !dt.Valid() {
		return nil, fmt.Errorf("%w: dtype %v is not reducible (want bf16, fp16, fp32 or fp64)", ErrArgs, dt)
	}
	if !acc.Valid() {
		return nil, fmt.Errorf("%w: accumulate mode %v", ErrArgs, acc)
	}
	unit := w * dt.Size()
	if len(data)%unit != 0 {
		return nil, fmt.Errorf("%w: %d bytes is not W×count %v elements (W=%d: the size must be a multiple of %d bytes)", ErrArgs, len(data), dt, w, unit)
	}
	n := len(data) / w
	ins := make([][]byte, w)
	for r := range ins {
		ins[r] = data[r*n : (r+1)*n]
	}
	out := make([]byte, n)
	r := NewReducer(0)
	defer r.Close()
	if err := r.Reduce(dt, acc, ins, out); err != nil {
		return nil, err
	}
	return out, nil
}
