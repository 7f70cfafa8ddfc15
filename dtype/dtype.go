// Package dtype names the element types detcoll moves and reduces, and
// converts the 16-bit float formats to and from float32.
//
// Conversions follow docs/contract.md, "add(a, b) per dtype": widening (fp16/bf16 → float32) is
// exact; narrowing (float32 → fp16/bf16) rounds to nearest, ties to even,
// overflows to infinity, keeps subnormals, and maps every NaN to the
// canonical quiet NaN of the target type. All functions are pure and safe for
// concurrent use.
package dtype

import (
	"fmt"
	"strings"
)

// DType is an element type. The zero value is Invalid.
type DType uint8

const (
	Invalid DType = iota
	BF16          // bfloat16: 1 sign, 8 exponent, 7 fraction bits
	FP16          // IEEE binary16
	FP32          // IEEE binary32
	FP64          // IEEE binary64
	// Byte is an opaque 1-byte element: data movement (AllGather, Broadcast,
	// Scatter) of any element size, never reduced.
	Byte
)

// Canonical quiet NaNs (docs/contract.md, "add(a, b) per dtype").
const (
	CanonicalNaN32 uint32 = 0x7FC00000
	CanonicalNaN64 uint64 = 0x7FF8000000000000
	CanonicalNaN16 uint16 = 0x7E00 // fp16
	CanonicalNaNBF uint16 = 0x7FC0 // bf16
)

// Size is the element size in bytes, 0 for Invalid.
func (d DType) Size() int {
	switch d {
	case BF16, FP16:
		return 2
	case FP32:
		return 4
	case FP64:
		return 8
	case Byte:
		return 1
	}
	return 0
}

// Valid reports whether d is one of the four reducible types (Byte is not).
func (d DType) Valid() bool { return d >= BF16 && d <= FP64 }

// String is the canonical short name: bf16, fp16, fp32, fp64.
func (d DType) String() string {
	switch d {
	case BF16:
		return "bf16"
	case FP16:
		return "fp16"
	case FP32:
		return "fp32"
	case FP64:
		return "fp64"
	case Byte:
		return "byte"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Parse accepts bf16, fp16, fp32, fp64 and the aliases f16, f32, f64,
// bfloat16, float16, float32, float64 (case-insensitive).
func Parse(s string) (DType, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "bf16", "bfloat16":
		return BF16, nil
	case "fp16", "f16", "float16", "half":
		return FP16, nil
	case "fp32", "f32", "float32", "float":
		return FP32, nil
	case "fp64", "f64", "float64", "double":
		return FP64, nil
	case "byte", "u8", "uint8":
		return Byte, nil
	}
	return Invalid, fmt.Errorf("dtype: unknown dtype %q (want bf16, fp16, fp32 or fp64)", s)
}

// MarshalText and UnmarshalText make DType usable in flags and JSON.
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() && d != Byte {
		return nil, fmt.Errorf("dtype: cannot marshal %v", d)
	}
	return []byte(d.String()), nil
}

func (d *DType) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
