package devcomm

import (
	"fmt"
	"math"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

// Argument checks of the collectives: they enqueue nothing and return
// errors wrapping detcoll.ErrInvalidArgument.

func argErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", detcoll.ErrInvalidArgument, fmt.Sprintf(format, args...))
}

// byteCount is count elements of sz bytes times mult, or an error when that
// is negative or overflows.
func byteCount(count, sz, mult int) (int, error) {
	if count < 0 {
		return 0, argErr("negative count %d", count)
	}
	if sz <= 0 || mult <= 0 {
		return 0, argErr("element size %d", sz)
	}
	if count > math.MaxInt/sz/mult {
		return 0, argErr("count %d of %d-byte elements overflows", count, sz)
	}
	return count * sz * mult, nil
}

// checkBuf checks that b can hold need bytes: declared size, nil pointer and
// element alignment.
func checkBuf(what string, b Buffer, need, align int) error {
	if b.Bytes < 0 {
		return argErr("%s declares %d bytes", what, b.Bytes)
	}
	if need > b.Bytes {
		return argErr("%s: the count needs %d bytes but the buffer declares %d", what, need, b.Bytes)
	}
	if need == 0 {
		return nil
	}
	if b.Ptr == 0 {
		return argErr("%s is a nil device pointer", what)
	}
	if align > 1 && uint64(b.Ptr)%uint64(align) != 0 {
		return argErr("%s at %#x is not aligned to the %d-byte element", what, uint64(b.Ptr), align)
	}
	return nil
}

// overlaps reports whether [a, a+an) and [b, b+bn) share a byte.
func overlaps(a DevicePtr, an int, b DevicePtr, bn int) bool {
	if an <= 0 || bn <= 0 {
		return false
	}
	return a < b.Add(bn) && b < a.Add(an)
}

func checkAlgAcc(alg detcoll.Algorithm, acc detcoll.Accumulate) error {
	if alg == detcoll.Auto || !alg.Valid() {
		return argErr("unknown algorithm %v", alg)
	}
	if !acc.Valid() {
		return argErr("unknown accumulate mode %v", acc)
	}
	return nil
}

func checkReducible(dt dtype.DType) error {
	if !dt.Valid() {
		return argErr("dtype %v is not reducible (want bf16, fp16, fp32 or fp64)", dt)
	}
	return nil
}

// checkAllocs checks, with cuMemGetAddressRange, that every buffer's used
// range lies inside one allocation. Runs with the context current.
func (c *Comm) checkAllocs(bufs []Buffer, need []int) error {
	if !c.cfg.checkAlloc {
		return nil
	}
	return c.dev.Do(func() error {
		for i, b := range bufs {
			if need[i] == 0 {
				continue
			}
			base, size, err := c.rt.MemGetAddressRange(b.Ptr)
			if err != nil {
				return argErr("buffer at %#x is not device memory of this GPU: %v", uint64(b.Ptr), err)
			}
			if uint64(b.Ptr)+uint64(need[i]) > uint64(base)+size {
				return argErr("buffer at %#x: %d bytes run past the end of its allocation [%#x, +%d)", uint64(b.Ptr), need[i], uint64(base), size)
			}
		}
		return nil
	})
}
