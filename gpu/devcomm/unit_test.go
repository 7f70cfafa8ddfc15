package devcomm

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/internal/cuda"
)

// Tests that need no GPU: argument checks, layouts, inputs (signatures and
// the agreement: agree_test.go).

func TestCheckBuf(t *testing.T) {
	cases := []struct {
		name  string
		b     Buffer
		need  int
		align int
		ok    bool
	}{
		{"fits", Buffer{0x1000, 64}, 64, 2, true},
		{"zero need, nil pointer", Buffer{0, 0}, 0, 2, true},
		{"nil pointer", Buffer{0, 64}, 2, 2, false},
		{"beyond declared", Buffer{0x1000, 63}, 64, 2, false},
		{"negative declared", Buffer{0x1000, -1}, 0, 2, false},
		{"misaligned", Buffer{0x1001, 64}, 2, 2, false},
		{"bytes need no alignment", Buffer{0x1001, 64}, 2, 1, true},
	}
	for _, c := range cases {
		err := checkBuf("send", c.b, c.need, c.align)
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok=%v", c.name, err, c.ok)
		}
		if err != nil && !errors.Is(err, detcoll.ErrInvalidArgument) {
			t.Errorf("%s: %v does not wrap ErrInvalidArgument", c.name, err)
		}
	}
}

func TestByteCount(t *testing.T) {
	if n, err := byteCount(7, 2, 3); err != nil || n != 42 {
		t.Errorf("byteCount(7,2,3) = %d, %v", n, err)
	}
	if _, err := byteCount(-1, 2, 1); !errors.Is(err, detcoll.ErrInvalidArgument) {
		t.Errorf("negative count: %v", err)
	}
	if _, err := byteCount(math.MaxInt/2, 4, 1); !errors.Is(err, detcoll.ErrInvalidArgument) {
		t.Errorf("overflow: %v", err)
	}
	if _, err := byteCount(1, 0, 1); err == nil {
		t.Errorf("zero element size accepted")
	}
}

func TestOverlaps(t *testing.T) {
	if !overlaps(100, 10, 105, 10) || !overlaps(105, 10, 100, 10) {
		t.Error("overlapping ranges not detected")
	}
	if overlaps(100, 10, 110, 10) || overlaps(100, 0, 100, 10) {
		t.Error("disjoint or empty ranges reported as overlapping")
	}
}

func TestSlotsKeepAlignment(t *testing.T) {
	for off := 0; off < 40; off += 3 {
		for like := DevicePtr(0x1000); like < 0x1010; like++ {
			for _, n := range []int{0, 1, 15, 16, 17, 1000} {
				base, stride, need := slots(off, like, n, 3)
				if base < off || stride < n || stride%16 != 0 || need != base-off+3*stride {
					t.Fatalf("slots(%d, %#x, %d) = %d, %d, %d", off, like, n, base, stride, need)
				}
				if (uint64(base)+0x10000)%16 != uint64(like)%16 {
					t.Fatalf("slots(%d, %#x, %d): base %d is not like mod 16", off, like, n, base)
				}
			}
		}
	}
	for r := 0; r < 4; r++ {
		seen := map[int]bool{}
		for p := 0; p < 4; p++ {
			if p == r {
				continue
			}
			s := slotOf(p, r)
			if s < 0 || s > 2 || seen[s] {
				t.Fatalf("slotOf(%d, %d) = %d", p, r, s)
			}
			seen[s] = true
		}
	}
}

func TestChunks(t *testing.T) {
	cases := []struct{ n, chunk, k, size int }{
		{1000, 0, 1, 1000},
		{1000, 600, 1, 1000}, // less than two chunks: not cut
		{4096, 1024, 4, 1024},
		{4100, 1024, 5, 1024}, // the last piece is short
		{5000, 1000, 5, 1024}, // chunks round up to 256 bytes
	}
	for _, c := range cases {
		k, size := chunks(c.n, c.chunk)
		if k != c.k || size != c.size {
			t.Errorf("chunks(%d, %d) = %d, %d; want %d, %d", c.n, c.chunk, k, size, c.k, c.size)
		}
		if k > 1 && ((k-1)*size >= c.n || k*size < c.n) {
			t.Errorf("chunks(%d, %d): %d pieces of %d do not cover the bytes exactly", c.n, c.chunk, k, size)
		}
	}
}

func TestCallOptions(t *testing.T) {
	cfg := config{acc: detcoll.AccumulateNative}
	cc := cfg.callOptions(7, nil)
	if cc.stream != 7 || cc.alg != detcoll.Auto || cc.acc != detcoll.AccumulateNative {
		t.Fatalf("defaults: %+v", cc)
	}
	cc = cfg.callOptions(7, []CallOption{OnStream(9), WithAlgorithm(detcoll.A2ATree), WithAccumulate(detcoll.AccumulateF32)})
	if cc.stream != 9 || cc.alg != detcoll.A2ATree || cc.acc != detcoll.AccumulateF32 {
		t.Fatalf("options: %+v", cc)
	}
}

func TestNewRejectsEmptyJob(t *testing.T) {
	if _, err := New(context.Background(), nil); !errors.Is(err, detcoll.ErrInvalidArgument) {
		t.Fatalf("New(nil job) = %v", err)
	}
}

// Without a usable GPU, New fails with an error (and no crash), on every rank.
func TestNewWithoutGPU(t *testing.T) {
	if cuda.Available() == nil {
		if n, err := cuda.DeviceCount(); err == nil && n > 0 {
			t.Skip("a GPU is present; the GPU tests cover New")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := cluster.Init(ctx, cluster.Options{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	c, err := New(ctx, job)
	if err == nil {
		c.Close()
		t.Fatal("New succeeded without a GPU")
	}
	t.Logf("New without a GPU: %v", err)
}
