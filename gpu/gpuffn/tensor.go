package gpuffn

import (
	"fmt"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/parallel"
)

// blockAlign is the byte alignment of every block of a blocked tensor and
// of every partial-product slab: the operands of corresponding GEMM calls
// then have the same address alignment at every TP size (cuBLAS may choose
// its kernel by alignment).
const blockAlign = 256

func padBytes(n int) int { return (n + blockAlign - 1) / blockAlign * blockAlign }

// Tensor is a bf16 matrix in device memory (the parallel.Tensor of this
// package). It is row-major, either plain (one block) or stored as equal
// blocks, each itself row-major and starting on a 256-byte boundary:
//
//   - column blocks: block b holds columns [b·cols/blocks, (b+1)·cols/blocks)
//     as a rows × cols/blocks matrix (Gate and Up weights and their
//     gradients, and the layer's [tokens × I/TP] activations, in blocks of
//     I/L columns);
//   - row blocks: block b holds rows [b·rows/blocks, (b+1)·rows/blocks) (the
//     Down weight and its gradient, in blocks of I/L rows).
//
// Blocks of I/L are the canonical K chunks of the row-parallel GEMMs and
// the units every TP rank computes whole, which is what makes every cuBLAS
// call the same at every TP size. Activations x, y, dy and dx are plain
// [tokens × hidden]. Tensors come from Layer.Upload, NewTensor or the
// layer's calls, and go back with Layer.Free.
type Tensor struct {
	rows, cols int
	blocks     int
	byCols     bool
	stride     int // bytes from one block to the next
	ptr        cuda.DevicePtr
}

var _ parallel.Tensor = (*Tensor)(nil)

// DType is always bf16.
func (t *Tensor) DType() dtype.DType { return dtype.BF16 }

// Rows is the number of rows.
func (t *Tensor) Rows() int { return t.rows }

// Cols is the number of columns.
func (t *Tensor) Cols() int { return t.cols }

// Blocks is the number of blocks (1: plain row-major).
func (t *Tensor) Blocks() int { return t.blocks }

// ColumnBlocks reports whether the blocks split the columns (else the rows).
func (t *Tensor) ColumnBlocks() bool { return t.byCols }

// Ptr is the device address of block 0.
func (t *Tensor) Ptr() cuda.DevicePtr { return t.ptr }

// BlockPtr is the device address of block b.
func (t *Tensor) BlockPtr(b int) cuda.DevicePtr { return t.ptr + cuda.DevicePtr(b*t.stride) }

// BlockStride is the distance in bytes from one block to the next.
func (t *Tensor) BlockStride() int { return t.stride }

func (t *Tensor) blockRows() int {
	if t.byCols {
		return t.rows
	}
	return t.rows / t.blocks
}

func (t *Tensor) blockCols() int {
	if t.byCols {
		return t.cols / t.blocks
	}
	return t.cols
}

// bytes is the size of the allocation.
func (t *Tensor) bytes() int {
	if t.blocks == 1 {
		return t.rows * t.cols * 2
	}
	return (t.blocks-1)*t.stride + t.blockRows()*t.blockCols()*2
}

func (t *Tensor) String() string {
	if t == nil {
		return "<nil tensor>"
	}
	if t.blocks == 1 {
		return fmt.Sprintf("bf16 %d×%d", t.rows, t.cols)
	}
	what := "row"
	if t.byCols {
		what = "column"
	}
	return fmt.Sprintf("bf16 %d×%d in %d %s blocks", t.rows, t.cols, t.blocks, what)
}

// layout returns the shape of a tensor without memory.
func layout(rows, cols, blocks int, byCols bool) (*Tensor, error) {
	if rows < 1 || cols < 1 || blocks < 1 {
		return nil, fmt.Errorf("%w: tensor %d×%d in %d blocks", parallel.ErrInvalidArgument, rows, cols, blocks)
	}
	if (byCols && cols%blocks != 0) || (!byCols && rows%blocks != 0) {
		return nil, fmt.Errorf("%w: %d×%d does not split into %d equal blocks", parallel.ErrInvalidArgument, rows, cols, blocks)
	}
	t := &Tensor{rows: rows, cols: cols, blocks: blocks, byCols: byCols && blocks > 1}
	t.stride = padBytes(t.blockRows() * t.blockCols() * 2)
	if blocks == 1 {
		t.stride = rows * cols * 2
	}
	return t, nil
}

// pack lays out m's bytes as t stores them (padding zero).
func (t *Tensor) pack(m *parallel.Matrix) ([]byte, error) {
	if m == nil || m.DType() != dtype.BF16 || m.Rows() != t.rows || m.Cols() != t.cols {
		return nil, fmt.Errorf("%w: cannot store %v as %v", parallel.ErrInvalidArgument, describe(m), t)
	}
	src := m.Bytes()
	if t.blocks == 1 {
		return append([]byte(nil), src...), nil
	}
	out := make([]byte, t.bytes())
	br, bc := t.blockRows(), t.blockCols()
	for b := 0; b < t.blocks; b++ {
		dst := out[b*t.stride:]
		for i := 0; i < br; i++ {
			r, c := i, 0
			if t.byCols {
				c = b * bc
			} else {
				r = b*br + i
			}
			copy(dst[i*bc*2:(i+1)*bc*2], src[(r*t.cols+c)*2:(r*t.cols+c+bc)*2])
		}
	}
	return out, nil
}

// unpack turns t's stored bytes back into a plain row-major matrix.
func (t *Tensor) unpack(b []byte) (*parallel.Matrix, error) {
	out := make([]byte, t.rows*t.cols*2)
	if t.blocks == 1 {
		copy(out, b)
	} else {
		br, bc := t.blockRows(), t.blockCols()
		for k := 0; k < t.blocks; k++ {
			src := b[k*t.stride:]
			for i := 0; i < br; i++ {
				r, c := i, 0
				if t.byCols {
					c = k * bc
				} else {
					r = k*br + i
				}
				copy(out[(r*t.cols+c)*2:(r*t.cols+c+bc)*2], src[i*bc*2:(i+1)*bc*2])
			}
		}
	}
	return parallel.MatrixFromBytes(dtype.BF16, t.rows, t.cols, out)
}

func describe(m *parallel.Matrix) string {
	if m == nil {
		return "a nil matrix"
	}
	return fmt.Sprintf("%v %d×%d", m.DType(), m.Rows(), m.Cols())
}
