package parallel

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/detcoll/detcoll/dtype"
)

// Tensor is a row-major rows×cols array of one dtype in some memory. On the
// host it is a *Matrix; a GPU backend (see RegisterGPUBackend) passes its own
// device tensors through the same layer interfaces. Rows are tokens
// wherever a layer takes activations.
type Tensor interface {
	DType() dtype.DType
	Rows() int
	Cols() int
}

// Matrix is the host Tensor: rows×cols elements of BF16, FP16 or FP32,
// stored row-major as raw little-endian bytes (the same bytes the
// collectives move). The zero Matrix is a 0×0 matrix of dtype Invalid.
//
// A Matrix returned by a layer is owned by the caller. RowSlice returns a
// view that shares the data.
type Matrix struct {
	dt         dtype.DType
	rows, cols int
	data       []byte
}

func matrixDType(dt dtype.DType) error {
	switch dt {
	case dtype.BF16, dtype.FP16, dtype.FP32:
		return nil
	}
	return fmt.Errorf("%w: dtype %v (a Matrix holds bf16, fp16 or fp32)", ErrInvalidArgument, dt)
}

// NewMatrix returns a zeroed (+0) rows×cols matrix.
func NewMatrix(dt dtype.DType, rows, cols int) (*Matrix, error) {
	if err := matrixDType(dt); err != nil {
		return nil, err
	}
	if rows < 0 || cols < 0 {
		return nil, fmt.Errorf("%w: matrix shape %d×%d", ErrInvalidArgument, rows, cols)
	}
	return newMatrix(dt, rows, cols), nil
}

func newMatrix(dt dtype.DType, rows, cols int) *Matrix {
	return &Matrix{dt: dt, rows: rows, cols: cols, data: make([]byte, rows*cols*dt.Size())}
}

// MatrixFromBytes wraps data (rows*cols little-endian elements) without copying.
func MatrixFromBytes(dt dtype.DType, rows, cols int, data []byte) (*Matrix, error) {
	if err := matrixDType(dt); err != nil {
		return nil, err
	}
	if rows < 0 || cols < 0 || len(data) != rows*cols*dt.Size() {
		return nil, fmt.Errorf("%w: %d bytes for a %d×%d %v matrix", ErrInvalidArgument, len(data), rows, cols, dt)
	}
	return &Matrix{dt: dt, rows: rows, cols: cols, data: data}, nil
}

// MatrixFromFloat32 rounds v (rows*cols values, row-major) to dt, to
// nearest even.
func MatrixFromFloat32(dt dtype.DType, rows, cols int, v []float32) (*Matrix, error) {
	m, err := NewMatrix(dt, rows, cols)
	if err != nil {
		return nil, err
	}
	if len(v) != rows*cols {
		return nil, fmt.Errorf("%w: %d values for a %d×%d matrix", ErrInvalidArgument, len(v), rows, cols)
	}
	for i, x := range v {
		store(dt, m.data, i, x)
	}
	return m, nil
}

// DType is the element type.
func (m *Matrix) DType() dtype.DType { return m.dt }

// Rows is the number of rows.
func (m *Matrix) Rows() int { return m.rows }

// Cols is the number of columns.
func (m *Matrix) Cols() int { return m.cols }

// Bytes is the raw row-major data (not a copy).
func (m *Matrix) Bytes() []byte { return m.data }

// At is element (i, j), widened exactly to float32.
func (m *Matrix) At(i, j int) float32 { return load(m.dt, m.data, i*m.cols+j) }

// Set rounds v to the dtype (nearest even, NaN canonical) into (i, j).
func (m *Matrix) Set(i, j int, v float32) { store(m.dt, m.data, i*m.cols+j, v) }

// Bits is the raw bit pattern of element (i, j) (16 or 32 bits).
func (m *Matrix) Bits(i, j int) uint32 {
	k := i*m.cols + j
	if m.dt == dtype.FP32 {
		return binary.LittleEndian.Uint32(m.data[4*k:])
	}
	return uint32(binary.LittleEndian.Uint16(m.data[2*k:]))
}

// Float32s returns the elements widened exactly to float32, row-major.
func (m *Matrix) Float32s() []float32 {
	out := make([]float32, m.rows*m.cols)
	widen(m.dt, m.data, out)
	return out
}

// RowSlice is a view of rows [lo, hi) sharing m's data.
func (m *Matrix) RowSlice(lo, hi int) *Matrix {
	rb := m.cols * m.dt.Size()
	return &Matrix{dt: m.dt, rows: hi - lo, cols: m.cols, data: m.data[lo*rb : hi*rb : hi*rb]}
}

// Clone is a deep copy.
func (m *Matrix) Clone() *Matrix {
	return &Matrix{dt: m.dt, rows: m.rows, cols: m.cols, data: append([]byte(nil), m.data...)}
}

// BitsEqual reports whether a and b have the same dtype, shape and bits.
func BitsEqual(a, b *Matrix) bool {
	if a.dt != b.dt || a.rows != b.rows || a.cols != b.cols {
		return false
	}
	return string(a.data) == string(b.data)
}

// ColSlice returns a copy of columns [lo, hi).
func (m *Matrix) ColSlice(lo, hi int) *Matrix {
	sz := m.dt.Size()
	out := newMatrix(m.dt, m.rows, hi-lo)
	for i := 0; i < m.rows; i++ {
		copy(out.data[i*(hi-lo)*sz:(i+1)*(hi-lo)*sz], m.data[(i*m.cols+lo)*sz:(i*m.cols+hi)*sz])
	}
	return out
}

// ConcatRows stacks matrices of one dtype and width vertically.
func ConcatRows(ms ...*Matrix) (*Matrix, error) {
	if len(ms) == 0 {
		return nil, fmt.Errorf("%w: ConcatRows of nothing", ErrInvalidArgument)
	}
	rows := 0
	for _, m := range ms {
		if m.dt != ms[0].dt || m.cols != ms[0].cols {
			return nil, fmt.Errorf("%w: ConcatRows of %v×%d and %v×%d", ErrInvalidArgument, ms[0].dt, ms[0].cols, m.dt, m.cols)
		}
		rows += m.rows
	}
	out := newMatrix(ms[0].dt, rows, ms[0].cols)
	off := 0
	for _, m := range ms {
		off += copy(out.data[off:], m.data)
	}
	return out, nil
}

// ConcatCols places matrices of one dtype and height side by side.
func ConcatCols(ms ...*Matrix) (*Matrix, error) {
	if len(ms) == 0 {
		return nil, fmt.Errorf("%w: ConcatCols of nothing", ErrInvalidArgument)
	}
	cols := 0
	for _, m := range ms {
		if m.dt != ms[0].dt || m.rows != ms[0].rows {
			return nil, fmt.Errorf("%w: ConcatCols of %v with %d rows and %v with %d rows", ErrInvalidArgument, ms[0].dt, ms[0].rows, m.dt, m.rows)
		}
		cols += m.cols
	}
	out := newMatrix(ms[0].dt, ms[0].rows, cols)
	sz := out.dt.Size()
	off := 0
	for _, m := range ms {
		for i := 0; i < m.rows; i++ {
			copy(out.data[(i*cols+off)*sz:], m.data[i*m.cols*sz:(i+1)*m.cols*sz])
		}
		off += m.cols
	}
	return out, nil
}

// permuteRows returns out with out.row(dst[i]) = m.row(i).
func permuteRows(m *Matrix, dst []int) *Matrix {
	out := newMatrix(m.dt, m.rows, m.cols)
	rb := m.cols * m.dt.Size()
	for i, d := range dst {
		copy(out.data[d*rb:(d+1)*rb], m.data[i*rb:(i+1)*rb])
	}
	return out
}

// gatherRows returns out with out.row(i) = m.row(src[i]).
func gatherRows(m *Matrix, src []int) *Matrix {
	out := newMatrix(m.dt, len(src), m.cols)
	rb := m.cols * m.dt.Size()
	for i, s := range src {
		copy(out.data[i*rb:(i+1)*rb], m.data[s*rb:(s+1)*rb])
	}
	return out
}

// load widens element i of b exactly to float32.
func load(dt dtype.DType, b []byte, i int) float32 {
	switch dt {
	case dtype.BF16:
		return dtype.BF16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
	case dtype.FP16:
		return dtype.FP16ToFloat32(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
}

// store rounds v to dt (nearest even) into element i; any NaN is written as
// the dtype's canonical quiet NaN (docs/contract.md, "add(a, b) per dtype").
func store(dt dtype.DType, b []byte, i int, v float32) {
	switch dt {
	case dtype.BF16:
		binary.LittleEndian.PutUint16(b[2*i:], dtype.Float32ToBF16(v))
	case dtype.FP16:
		binary.LittleEndian.PutUint16(b[2*i:], dtype.Float32ToFP16(v))
	default:
		u := math.Float32bits(v)
		if v != v {
			u = dtype.CanonicalNaN32
		}
		binary.LittleEndian.PutUint32(b[4*i:], u)
	}
}

// roundTo is the float32 value of v rounded to dt (v itself for fp32).
func roundTo(dt dtype.DType, v float32) float32 {
	switch dt {
	case dtype.BF16:
		return dtype.RoundBF16(v)
	case dtype.FP16:
		return dtype.RoundFP16(v)
	}
	return v
}

func widen(dt dtype.DType, b []byte, out []float32) {
	for i := range out {
		out[i] = load(dt, b, i)
	}
}

// negZeroFill fills b with the dtype's -0: the additive identity of IEEE
// round-to-nearest addition (x + -0 == x for every x, -0 included).
func negZeroFill(dt dtype.DType, b []byte) {
	switch dt.Size() {
	case 2:
		for i := 0; i+1 < len(b); i += 2 {
			b[i], b[i+1] = 0x00, 0x80
		}
	case 4:
		for i := 0; i+3 < len(b); i += 4 {
			b[i], b[i+1], b[i+2], b[i+3] = 0, 0, 0, 0x80
		}
	}
}
