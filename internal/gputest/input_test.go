package gputest

import (
	"bytes"
	"errors"
	"testing"

	"github.com/detcoll/detcoll/dtype"
)

func TestFillInput(t *testing.T) {
	a := make([]byte, 4096)
	b := make([]byte, 4096)
	FillInput(a, dtype.BF16, 9, 1)
	FillInput(b, dtype.BF16, 9, 1)
	if !bytes.Equal(a, b) {
		t.Fatal("inputs are not a pure function of (dtype, seed, rank)")
	}
	FillInput(b, dtype.BF16, 9, 2)
	if bytes.Equal(a, b) {
		t.Fatal("two ranks got the same input")
	}
}

func TestParallel(t *testing.T) {
	got := make([]int, 1000)
	err := Parallel(len(got), 7, func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			got[i]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != 1 {
			t.Fatalf("element %d visited %d times", i, v)
		}
	}
	want := errors.New("boom")
	if err := Parallel(10, 1, func(lo, hi int) error { return want }); !errors.Is(err, want) {
		t.Fatalf("Parallel error = %v", err)
	}
}
