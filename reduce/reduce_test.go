package reduce

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/detcoll/detcoll/dtype"
)

var allDTypes = []dtype.DType{dtype.BF16, dtype.FP16, dtype.FP32, dtype.FP64}

func f32buf(v ...float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func u16buf(v ...uint16) []byte {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], x)
	}
	return b
}

// Known answers that pin the tree shape and the rounding.
func TestOracleKnownAnswers(t *testing.T) {
	neg0 := float32(math.Copysign(0, -1))
	inf := float32(math.Inf(1))
	cases := []struct {
		name string
		in   []float32
		want uint32
	}{
		// (1 + 1e8) + -1e8 = 0 under ((r0+r1)+r2); r0+(r1+r2) would give 1.
		{"W3 order", []float32{1, 1e8, -1e8}, 0},
		// W=4: (1e8 + 1) + (-1e8 + 1) = 0; left-to-right would give 1.
		{"W4 balanced", []float32{1e8, 1, -1e8, 1}, 0},
		{"signed zero", []float32{neg0, neg0}, 0x80000000},
		{"mixed zero", []float32{neg0, 0}, 0},
		{"inf-inf canonical NaN", []float32{inf, -inf}, dtype.CanonicalNaN32},
		{"NaN payload canonical", []float32{math.Float32frombits(0xFFC12345), 1}, dtype.CanonicalNaN32},
		{"W1 NaN canonical", []float32{math.Float32frombits(0x7F800001)}, dtype.CanonicalNaN32},
		{"W1 copy", []float32{neg0}, 0x80000000},
		{"subnormal kept", []float32{math.SmallestNonzeroFloat32, math.SmallestNonzeroFloat32}, 2},
		{"overflow", []float32{math.MaxFloat32, math.MaxFloat32}, 0x7F800000},
	}
	for _, c := range cases {
		ins := make([][]byte, len(c.in))
		for i, v := range c.in {
			ins[i] = f32buf(v)
		}
		out := make([]byte, 4)
		if err := Oracle(dtype.FP32, Native, ins, out); err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint32(out); got != c.want {
			t.Errorf("%s: got %#08x want %#08x", c.name, got, c.want)
		}
	}
}

// In native mode every node rounds to bf16; in f32 mode only the root does.
func TestAccumulateModes(t *testing.T) {
	one := dtype.Float32ToBF16(1)
	small := dtype.Float32ToBF16(1.0 / 256) // half an ulp of 1 in bf16
	ins := [][]byte{u16buf(one), u16buf(small), u16buf(small), u16buf(small)}
	out := make([]byte, 2)
	// native: (1+2^-8)→1 (tie to even), (2^-8+2^-8)=2^-7; 1+2^-7 = exact bf16
	Oracle(dtype.BF16, Native, ins, out)
	if got := dtype.BF16ToFloat32(binary.LittleEndian.Uint16(out)); got != 1+1.0/128 {
		t.Errorf("native: got %v", got)
	}
	ins = [][]byte{u16buf(one), u16buf(small), u16buf(0), u16buf(0)}
	Oracle(dtype.BF16, Native, ins, out)
	nat := binary.LittleEndian.Uint16(out)
	Oracle(dtype.BF16, F32, ins, out)
	f32 := binary.LittleEndian.Uint16(out)
	if dtype.BF16ToFloat32(nat) != 1 || dtype.BF16ToFloat32(f32) != 1 {
		t.Errorf("tie cases: native %#x f32 %#x", nat, f32)
	}
	// (1 + 2^-8) + (2^-8 + 0): native rounds the left node to 1, then 1+2^-8 → 1;
	// f32 keeps 1+2^-7 exactly.
	ins = [][]byte{u16buf(one), u16buf(small), u16buf(small), u16buf(0)}
	Oracle(dtype.BF16, Native, ins, out)
	nat = binary.LittleEndian.Uint16(out)
	Oracle(dtype.BF16, F32, ins, out)
	f32 = binary.LittleEndian.Uint16(out)
	if dtype.BF16ToFloat32(nat) != 1 || dtype.BF16ToFloat32(f32) != 1+1.0/128 {
		t.Errorf("modes: native %v f32 %v", dtype.BF16ToFloat32(nat), dtype.BF16ToFloat32(f32))
	}
}

// special values every dtype can hold, as float64.
var specials = []float64{0, math.Copysign(0, -1), 1, -1, math.Inf(1), math.Inf(-1), math.NaN(),
	65504, -65504, 6e-8, -6e-8, 1e-40, 3.4e38, -3.4e38, 1e8, -1e8, 1e300, -1e300, 5e-324}

// fill writes adversarial or random elements into b.
func fill(rng *rand.Rand, dt dtype.DType, b []byte, mode int) {
	n := len(b) / dt.Size()
	for i := 0; i < n; i++ {
		var v float64
		switch mode {
		case 0: // random wide range
			v = (rng.Float64()*2 - 1) * math.Pow(2, float64(rng.IntN(40)-20))
		case 1: // specials and cancelling values
			if rng.IntN(3) == 0 {
				v = specials[rng.IntN(len(specials))]
			} else {
				v = float64(rng.IntN(7)-3) * math.Pow(2, float64(rng.IntN(30)-5))
			}
		case 2: // raw random bits: NaN payloads, subnormals, everything
			switch dt {
			case dtype.FP64:
				binary.LittleEndian.PutUint64(b[8*i:], rng.Uint64())
			case dtype.FP32:
				binary.LittleEndian.PutUint32(b[4*i:], rng.Uint32())
			default:
				binary.LittleEndian.PutUint16(b[2*i:], uint16(rng.Uint32()))
			}
			continue
		}
		put(dt, b, i, v)
	}
}

func put(dt dtype.DType, b []byte, i int, v float64) {
	switch dt {
	case dtype.FP64:
		binary.LittleEndian.PutUint64(b[8*i:], math.Float64bits(v))
	case dtype.FP32:
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(v)))
	case dtype.BF16:
		binary.LittleEndian.PutUint16(b[2*i:], dtype.Float32ToBF16(float32(v)))
	case dtype.FP16:
		binary.LittleEndian.PutUint16(b[2*i:], dtype.Float32ToFP16(float32(v)))
	}
}

func firstDiff(dt dtype.DType, a, b []byte) string {
	sz := dt.Size()
	for i := 0; i < len(a); i += sz {
		if !bytes.Equal(a[i:i+sz], b[i:i+sz]) {
			return fmt.Sprintf("element %d: %x vs %x", i/sz, a[i:i+sz], b[i:i+sz])
		}
	}
	return "lengths differ"
}

func TestFastEqualsOracle(t *testing.T) {
	r := NewReducer(3)
	defer r.Close()
	rng := rand.New(rand.NewPCG(7, 9))
	// A representative sweep by default; DETCOLL_LONG_TESTS=1 adds large counts.
	counts := []int{0, 1, 2, 3, 7, 13, 1025, 2053}
	if os.Getenv("DETCOLL_LONG_TESTS") != "" {
		counts = append(counts, 1023, 1024, 4099, 65537, 1<<20+7)
	}
	for w := 1; w <= 16; w++ {
		for _, dt := range allDTypes {
			for _, acc := range []Accumulate{Native, F32} {
				for _, n := range counts {
					for mode := 0; mode < 3; mode++ {
						for _, misalign := range []int{0, 1} {
							ins := make([][]byte, w)
							for i := range ins {
								buf := make([]byte, n*dt.Size()+misalign)
								ins[i] = buf[misalign:]
								fill(rng, dt, ins[i], mode)
							}
							want := make([]byte, n*dt.Size())
							if err := Oracle(dt, acc, ins, want); err != nil {
								t.Fatal(err)
							}
							obuf := make([]byte, n*dt.Size()+misalign)
							got := obuf[misalign:]
							if err := r.Reduce(dt, acc, ins, got); err != nil {
								t.Fatal(err)
							}
							if !bytes.Equal(got, want) {
								t.Fatalf("W=%d %v %v n=%d mode=%d misalign=%d: %s", w, dt, acc, n, mode, misalign, firstDiff(dt, got, want))
							}
							clear(got)
							if err := r.ReduceUncached(dt, acc, ins, got); err != nil {
								t.Fatal(err)
							}
							if !bytes.Equal(got, want) {
								t.Fatalf("uncached W=%d %v %v n=%d mode=%d misalign=%d: %s", w, dt, acc, n, mode, misalign, firstDiff(dt, got, want))
							}
							// In place: output aliases input 0 (and, for W>1, the last input).
							if w > 0 && n > 0 {
								cp := make([][]byte, w)
								for i := range ins {
									cp[i] = append([]byte(nil), ins[i]...)
								}
								alias := rng.IntN(w)
								if err := r.Reduce(dt, acc, cp, cp[alias]); err != nil {
									t.Fatal(err)
								}
								if !bytes.Equal(cp[alias], want) {
									t.Fatalf("in place W=%d %v %v n=%d: %s", w, dt, acc, n, firstDiff(dt, cp[alias], want))
								}
							}
						}
					}
				}
			}
		}
	}
}

func TestArgumentErrors(t *testing.T) {
	r := NewReducer(1)
	defer r.Close()
	four := make([]byte, 4)
	cases := []struct {
		name string
		dt   dtype.DType
		acc  Accumulate
		ins  [][]byte
		out  []byte
	}{
		{"invalid dtype", dtype.Invalid, Native, [][]byte{four}, four},
		{"bad accumulate", dtype.FP32, Accumulate(9), [][]byte{four}, four},
		{"no inputs", dtype.FP32, Native, nil, four},
		{"ragged output", dtype.FP32, Native, [][]byte{make([]byte, 5)}, make([]byte, 5)},
		{"input length", dtype.FP32, Native, [][]byte{four, make([]byte, 8)}, four},
	}
	for _, c := range cases {
		if err := Oracle(c.dt, c.acc, c.ins, c.out); err == nil {
			t.Errorf("Oracle %s: no error", c.name)
		}
		if err := r.Reduce(c.dt, c.acc, c.ins, c.out); err == nil {
			t.Errorf("Reduce %s: no error", c.name)
		}
	}
	if _, err := ParseAccumulate("bogus"); err == nil {
		t.Error("ParseAccumulate accepted bogus")
	}
}

func TestReduceNoAllocs(t *testing.T) {
	r := NewReducer(2)
	defer r.Close()
	ins := make([][]byte, 8)
	for i := range ins {
		ins[i] = make([]byte, 1<<20)
	}
	out := make([]byte, 1<<20)
	r.Reduce(dtype.BF16, Native, ins, out) // grow scratch
	if a := testing.AllocsPerRun(10, func() { r.Reduce(dtype.BF16, Native, ins, out) }); a != 0 {
		t.Fatalf("Reduce allocates %v times per call", a)
	}
}

func TestClosedReducerStillWorks(t *testing.T) {
	r := NewReducer(4)
	r.Close()
	r.Close()
	ins := [][]byte{make([]byte, 1<<20), make([]byte, 1<<20)}
	out := make([]byte, 1<<20)
	if err := r.Reduce(dtype.FP32, Native, ins, out); err != nil {
		t.Fatal(err)
	}
}

// FuzzFastEqualsOracle feeds arbitrary bytes as W rank buffers.
func FuzzFastEqualsOracle(f *testing.F) {
	f.Add(uint8(3), uint8(0), false, []byte{0, 0, 0x80, 0x7f, 1, 0, 0x80, 0xff, 0, 0, 0xc0, 0x7f})
	f.Add(uint8(8), uint8(1), true, bytes.Repeat([]byte{0x01, 0x7c, 0x00, 0x80}, 16))
	f.Add(uint8(5), uint8(2), false, bytes.Repeat([]byte{0xff}, 40))
	f.Add(uint8(16), uint8(3), false, bytes.Repeat([]byte{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xf0, 0x7f}, 16))
	r := NewReducer(2)
	f.Fuzz(func(t *testing.T, w8, dt8 uint8, f32acc bool, data []byte) {
		w := int(w8%16) + 1
		dt := allDTypes[int(dt8)%4]
		acc := Native
		if f32acc {
			acc = F32
		}
		per := len(data) / w / dt.Size() * dt.Size()
		ins := make([][]byte, w)
		for i := range ins {
			ins[i] = data[i*per : (i+1)*per]
		}
		want := make([]byte, per)
		got := make([]byte, per)
		if err := Oracle(dt, acc, ins, want); err != nil {
			t.Fatal(err)
		}
		for _, uncached := range []bool{false, true} {
			reduce := r.Reduce
			if uncached {
				reduce = r.ReduceUncached
			}
			clear(got)
			if err := reduce(dt, acc, ins, got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("W=%d %v %v uncached=%v: %s", w, dt, acc, uncached, firstDiff(dt, got, want))
			}
		}
	})
}

// TestFastSplitsEqualOracle runs the multi-worker split (counts above
// minParallelElems) with as many workers as a GPU host's cores: with 16
// workers and 135 blocks the last worker's range once started past the end
// and the fused bf16 kernel sliced out of bounds (seen on the H200 host).
func TestFastSplitsEqualOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for _, workers := range []int{2, 3, 7, 16, 17} {
		r := NewReducer(workers)
		for _, n := range []int{135 * blockElems, 129*blockElems + 5, 100003} {
			for _, w := range []int{2, 3, 8} {
				for _, dt := range allDTypes {
					ins := make([][]byte, w)
					for i := range ins {
						ins[i] = make([]byte, n*dt.Size())
						fill(rng, dt, ins[i], 0)
					}
					want := make([]byte, n*dt.Size())
					if err := Oracle(dt, Native, ins, want); err != nil {
						t.Fatal(err)
					}
					got := make([]byte, n*dt.Size())
					if err := r.Reduce(dt, Native, ins, got); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("%d workers W=%d %v n=%d: %s", workers, w, dt, n, firstDiff(dt, got, want))
					}
					clear(got)
					if err := r.ReduceUncached(dt, Native, ins, got); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("uncached, %d workers W=%d %v n=%d: %s", workers, w, dt, n, firstDiff(dt, got, want))
					}
				}
			}
		}
		r.Close()
	}
}
