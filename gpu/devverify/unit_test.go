package devverify

import (
	"bytes"
	"math"
	"testing"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/gputest"
)

func TestVerifyInputsAndExpectations(t *testing.T) {
	a := make([]byte, 4096)
	b := make([]byte, 4096)
	gputest.FillInput(a, dtype.BF16, 9, 1)
	gputest.FillInput(b, dtype.BF16, 9, 1)
	if !bytes.Equal(a, b) {
		t.Fatal("inputs are not a pure function of (dtype, seed, rank)")
	}
	gputest.FillInput(b, dtype.BF16, 9, 2)
	if bytes.Equal(a, b) {
		t.Fatal("two ranks got the same input")
	}
	// AllGather's expectation is the concatenation; ReduceScatter reduces block r.
	l := &vlane{inBytes: 4, outBytes: 8, inputs: [][]byte{{1, 2, 3, 4}, {5, 6, 7, 8}}, want: make([]byte, 8)}
	if err := expect(vcase{op: opAllGather, dt: dtype.Byte}, l, 2, 0); err != nil || !bytes.Equal(l.want, []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Fatalf("AllGather expectation %v, %v", l.want, err)
	}
	one := math.Float32bits(1)
	two := math.Float32bits(2)
	in0, in1 := make([]byte, 8), make([]byte, 8)
	gputest.PutLE(in0, uint64(one), 4)
	gputest.PutLE(in0[4:], uint64(two), 4)
	gputest.PutLE(in1, uint64(two), 4)
	gputest.PutLE(in1[4:], uint64(two), 4)
	l = &vlane{inBytes: 8, outBytes: 4, inputs: [][]byte{in0, in1}, want: make([]byte, 4)}
	if err := expect(vcase{op: opReduceScatter, dt: dtype.FP32}, l, 2, 1); err != nil {
		t.Fatal(err)
	}
	if got := math.Float32frombits(uint32(l.want[0]) | uint32(l.want[1])<<8 | uint32(l.want[2])<<16 | uint32(l.want[3])<<24); got != 4 {
		t.Fatalf("ReduceScatter block 1 = %v, want 4", got)
	}
}

// TestCases: the case list is the same for the same options, covers every
// operation and both AllGather paths when peer memory is in the list.
func TestCases(t *testing.T) {
	opt := VerifyOptions{Algorithms: []detcoll.Algorithm{detcoll.GatherTree, detcoll.OneShot}}.withDefaults()
	a, b := cases(opt, 2), cases(opt, 2)
	if len(a) != len(b) || len(a) == 0 {
		t.Fatalf("%d and %d cases", len(a), len(b))
	}
	seen := map[string]bool{}
	for _, c := range a {
		seen[opNames[c.op]+" "+c.algName()] = true
	}
	for _, want := range []string{"AllReduce gather_tree", "AllReduce one_shot", "ReduceScatter one_shot", "AllGather nccl", "AllGather ipc",
		"AllGatherMany ipc", "ReduceScatterMany gather_tree"} {
		if !seen[want] {
			t.Errorf("no %q case (have %v)", want, seen)
		}
	}

}
