// Package torchref writes the reference outputs of Go's parallel package
// that python/detcoll/torch/parallel.py is checked against bit for bit:
// inputs drawn from fixed seeds, and the outputs and gradients of
// parallel.MatMul (the layers' GEMMs), parallel.FFN (SwiGLU) and
// parallel.Attention (ag_rs) on one rank, which the package's contract makes
// the reference for every TP, SP and CP. The Python tests run the layers
// under torchrun at several TP/CP sizes and compare every element's raw
// bits with these files.
//
// Write(dir) produces dir/manifest.json and one raw little-endian file per
// tensor (see Manifest). The torchref test builds libdetcoll.so, writes a
// reference directory and runs the Python checks under torchrun.
package torchref

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/parallel"
)

// Tensor names one raw file: rows×cols little-endian elements of DType
// ("bf16", "fp16", "fp32" or "int32"), row-major.
type Tensor struct {
	File  string `json:"file"`
	DType string `json:"dtype"`
	Rows  int    `json:"rows"`
	Cols  int    `json:"cols"`
}

// Case is one reference computation. Kind is "matmul" (y = MatMul(a, b)),
// "linear" (y = x·W, dx = dy·Wᵀ, dW = xᵀ·dy, W in Go's [in × out]
// layout), "ffn" (parallel.FFN forward and backward, weights in Go's
// layout), "attn" (parallel.Attention forward and backward) or "formulas"
// (Exp32, Log32, Sigmoid32 of a vector).
type Case struct {
	Name    string            `json:"name"`
	Kind    string            `json:"kind"`
	DType   string            `json:"dtype"`
	Chunks  int               `json:"chunks,omitempty"`
	Heads   int               `json:"heads,omitempty"`
	HeadDim int               `json:"head_dim,omitempty"`
	Tensors map[string]Tensor `json:"tensors"`
	// NegZero counts the -0 elements of the named reference outputs, so a
	// test can check that the case exercises -0 at all.
	NegZero map[string]int `json:"neg_zero,omitempty"`
}

// Manifest is dir/manifest.json.
type Manifest struct {
	Cases []Case `json:"cases"`
}

var dtNames = map[dtype.DType]string{dtype.BF16: "bf16", dtype.FP16: "fp16", dtype.FP32: "fp32"}

type writer struct {
	dir string
	c   *Case
}

func (w *writer) put(name string, m *parallel.Matrix) error {
	file := w.c.Name + "." + name + ".bin"
	w.c.Tensors[name] = Tensor{File: file, DType: dtNames[m.DType()], Rows: m.Rows(), Cols: m.Cols()}
	return os.WriteFile(filepath.Join(w.dir, file), m.Bytes(), 0o644)
}

func (w *writer) putInt32(name string, v []int32) error {
	file := w.c.Name + "." + name + ".bin"
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	w.c.Tensors[name] = Tensor{File: file, DType: "int32", Rows: len(v), Cols: 1}
	return os.WriteFile(filepath.Join(w.dir, file), b, 0o644)
}

func (w *writer) countNegZero(name string, m *parallel.Matrix) {
	sign := uint32(0x8000)
	if m.DType() == dtype.FP32 {
		sign = 0x80000000
	}
	n := 0
	for i := 0; i < m.Rows(); i++ {
		for j := 0; j < m.Cols(); j++ {
			if m.Bits(i, j) == sign {
				n++
			}
		}
	}
	if w.c.NegZero == nil {
		w.c.NegZero = map[string]int{}
	}
	w.c.NegZero[name] = n
}

func randMatrix(rng *rand.Rand, dt dtype.DType, rows, cols int, scale float64) *parallel.Matrix {
	v := make([]float32, rows*cols)
	for i := range v {
		v[i] = float32(rng.NormFloat64() * scale)
	}
	m, err := parallel.MatrixFromFloat32(dt, rows, cols, v)
	if err != nil {
		panic(err) // shapes and dtypes are this file's constants
	}
	return m
}

// Write writes every reference case into dir (created if needed).
func Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var man Manifest
	add := func(c Case, fill func(w *writer) error) error {
		c.Tensors = map[string]Tensor{}
		w := &writer{dir: dir, c: &c}
		if err := fill(w); err != nil {
			return fmt.Errorf("torchref: case %s: %w", c.Name, err)
		}
		man.Cases = append(man.Cases, c)
		return nil
	}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP16, dtype.FP32} {
		n := dtNames[dt]
		// A bare GEMM with K not divisible by the chunks, and one with K < L.
		for _, s := range []struct{ m, k, n, l int }{{5, 37, 6, 8}, {3, 5, 4, 8}, {4, 50, 3, 12}} {
			name := fmt.Sprintf("matmul_%s_%dx%dx%d_l%d", n, s.m, s.k, s.n, s.l)
			err := add(Case{Name: name, Kind: "matmul", DType: n, Chunks: s.l}, func(w *writer) error {
				rng := rand.New(rand.NewPCG(uint64(s.k), uint64(dt)))
				a, b := randMatrix(rng, dt, s.m, s.k, 1), randMatrix(rng, dt, s.k, s.n, 1)
				y, err := parallel.MatMul(a, false, b, false, s.l)
				if err != nil {
					return err
				}
				return firstErr(w.put("a", a), w.put("b", b), w.put("y", y))
			})
			if err != nil {
				return err
			}
		}
	}
	for _, dt := range []dtype.DType{dtype.BF16, dtype.FP16, dtype.FP32} {
		n := dtNames[dt]
		if err := add(Case{Name: "linear_" + n, Kind: "linear", DType: n, Chunks: parallel.DefaultChunks}, linearCase(dt, 12, 64, 32)); err != nil {
			return err
		}
		if dt == dtype.FP16 {
			continue // fp16: the GEMMs and the linear layers; the FFN and attention in bf16 and fp32
		}
		if err := add(Case{Name: "ffn_" + n, Kind: "ffn", DType: n, Chunks: parallel.DefaultChunks}, ffnCase(dt, 12, 32, 64)); err != nil {
			return err
		}
		if err := add(Case{Name: "attn_" + n, Kind: "attn", DType: n, Heads: 2, HeadDim: 8}, attnCase(dt, 16, 2, 8, false)); err != nil {
			return err
		}
		if err := add(Case{Name: "attn_negzero_" + n, Kind: "attn", DType: n, Heads: 1, HeadDim: 4}, attnCase(dt, 8, 1, 4, true)); err != nil {
			return err
		}
	}
	if err := add(Case{Name: "formulas", Kind: "formulas", DType: "fp32"}, formulasCase); err != nil {
		return err
	}
	b, err := json.MarshalIndent(man, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "manifest.json"), b, 0o644)
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// linearCase: y = x·W (K = in), dx = dy·Wᵀ (K = out), dW = xᵀ·dy (K = tokens).
func linearCase(dt dtype.DType, tokens, in, out int) func(*writer) error {
	return func(w *writer) error {
		rng := rand.New(rand.NewPCG(7, uint64(dt)))
		x := randMatrix(rng, dt, tokens, in, 1)
		wt := randMatrix(rng, dt, in, out, 1/math.Sqrt(float64(in)))
		dy := randMatrix(rng, dt, tokens, out, 1)
		l := w.c.Chunks
		y, err1 := parallel.MatMul(x, false, wt, false, l)
		dx, err2 := parallel.MatMul(dy, false, wt, true, l)
		dw, err3 := parallel.MatMul(x, true, dy, false, l)
		if err := firstErr(err1, err2, err3); err != nil {
			return err
		}
		return firstErr(w.put("x", x), w.put("w", wt), w.put("dy", dy), w.put("y", y), w.put("dx", dx), w.put("dw", dw))
	}
}

// ffnCase runs parallel.FFN on one rank (the reference of every mesh).
func ffnCase(dt dtype.DType, tokens, h, i int) func(*writer) error {
	return func(w *writer) error {
		rng := rand.New(rand.NewPCG(11, uint64(dt)))
		x := randMatrix(rng, dt, tokens, h, 1)
		gate := randMatrix(rng, dt, h, i, 1/math.Sqrt(float64(h)))
		up := randMatrix(rng, dt, h, i, 1/math.Sqrt(float64(h)))
		down := randMatrix(rng, dt, i, h, 1/math.Sqrt(float64(i)))
		dy := randMatrix(rng, dt, tokens, h, 1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		comms, err := detcoll.NewInProc(1)
		if err != nil {
			return err
		}
		defer comms[0].Close()
		mesh, err := parallel.NewMesh(ctx, comms[0], 1, 1, 1)
		if err != nil {
			return err
		}
		defer mesh.Close()
		f, err := parallel.NewFFN(ctx, mesh, parallel.FFNConfig{Hidden: h, Intermediate: i, DType: dt, Chunks: w.c.Chunks})
		if err != nil {
			return err
		}
		wts, err := parallel.ShardFFNWeights(gate, up, down, 1, 0)
		if err != nil {
			return err
		}
		y, saved, err := f.Forward(ctx, x, wts)
		if err != nil {
			return err
		}
		g, err := f.Backward(ctx, dy, wts, saved)
		if err != nil {
			return err
		}
		return firstErr(w.put("x", x), w.put("gate", gate), w.put("up", up), w.put("down", down), w.put("dy", dy),
			w.put("y", y.(*parallel.Matrix)), w.put("dx", g.X.(*parallel.Matrix)), w.put("dgate", g.Gate.(*parallel.Matrix)),
			w.put("dup", g.Up.(*parallel.Matrix)), w.put("ddown", g.Down.(*parallel.Matrix)))
	}
}

// attnCase runs parallel.Attention (local_debug: one rank, the reference of
// every CP). negZero builds the inputs of parallel's -0 test: outputs and
// (bf16) value gradients that are -0 by underflow.
func attnCase(dt dtype.DType, s, heads, hd int, negZero bool) func(*writer) error {
	return func(w *writer) error {
		rng := rand.New(rand.NewPCG(13, uint64(dt)))
		width := heads * hd
		q, k := randMatrix(rng, dt, s, width, 1), randMatrix(rng, dt, s, width, 1)
		v, dout := randMatrix(rng, dt, s, width, 1), randMatrix(rng, dt, s, width, 1)
		pos := make([]int32, s)
		for i := range pos {
			pos[i] = int32(i)
		}
		if negZero {
			q, _ = parallel.NewMatrix(dt, s, width)
			tiny := math.Float32frombits(0x80000001)
			if dt == dtype.BF16 {
				tiny = dtype.BF16ToFloat32(0x8001)
			}
			nz := float32(math.Copysign(0, -1))
			for i := 0; i < s; i++ {
				v.Set(i, 0, nz)
				dout.Set(i, 0, nz)
			}
			v.Set(0, 0, tiny)
			if dt == dtype.BF16 {
				dout.Set(s-1, 0, tiny)
			}
		} else {
			// Two tokens share a position: the mask is pos[j] <= pos[i], not j <= i.
			pos[5] = 4
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		a, err := parallel.NewAttention(ctx, nil, parallel.AttentionConfig{Backend: parallel.LocalDebug, DType: dt, Heads: heads, HeadDim: hd})
		if err != nil {
			return err
		}
		fwd, err := a.Forward(ctx, q, k, v, pos)
		if err != nil {
			return err
		}
		g, err := a.Backward(ctx, dout, fwd)
		if err != nil {
			return err
		}
		out, lse := fwd.Out.(*parallel.Matrix), fwd.LSE.(*parallel.Matrix)
		dq, dk, dv := g.Q.(*parallel.Matrix), g.K.(*parallel.Matrix), g.V.(*parallel.Matrix)
		w.countNegZero("out", out)
		w.countNegZero("dv", dv)
		return firstErr(w.put("q", q), w.put("k", k), w.put("v", v), w.put("dout", dout), w.putInt32("pos", pos),
			w.put("out", out), w.put("lse", lse), w.put("dq", dq), w.put("dk", dk), w.put("dv", dv))
	}
}

// formulasCase: Exp32, Log32 and Sigmoid32 of random and special inputs.
func formulasCase(w *writer) error {
	rng := rand.New(rand.NewPCG(17, 0))
	var xs []float32
	for _, b := range []uint32{0, 0x80000000, 1, 0x80000001, 0x007FFFFF, 0x00800000, 0x7F800000, 0xFF800000, 0x7FC00000, 0x3F800000, 0xBF800000} {
		xs = append(xs, math.Float32frombits(b))
	}
	xs = append(xs, 88.72283, 88.72284, 88.7229, -103.972, -103.97208, -103.9721, -87.3, -87.4, -100, 89, -104, 0.5, -0.5, 0.70710677, 0.7071068)
	for len(xs) < 4096 {
		switch len(xs) % 4 {
		case 0:
			xs = append(xs, float32(rng.NormFloat64()*3))
		case 1:
			xs = append(xs, float32((rng.Float64()*2-1)*110))
		case 2:
			xs = append(xs, float32(math.Exp(rng.NormFloat64()*20))) // wide positive range for Log32
		default:
			xs = append(xs, math.Float32frombits(rng.Uint32()&0x807FFFFF|uint32(rng.IntN(256))<<23))
		}
	}
	col := func(f func(float32) float32) *parallel.Matrix {
		m, _ := parallel.NewMatrix(dtype.FP32, len(xs), 1)
		for i, x := range xs {
			m.Set(i, 0, f(x))
		}
		return m
	}
	return firstErr(w.put("x", col(func(x float32) float32 { return x })), w.put("exp", col(parallel.Exp32)),
		w.put("log", col(parallel.Log32)), w.put("sigmoid", col(parallel.Sigmoid32)))
}
