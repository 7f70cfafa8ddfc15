package devcomm

import (
	"testing"

	"github.com/detcoll/detcoll/gpu/devrt"
)

// TestRuntimesQueryStreams: both vendors' runtimes poll streams, so the
// bounded waits never fall back to a goroutine blocked in a synchronize.
func TestRuntimesQueryStreams(t *testing.T) {
	for _, v := range []string{"cuda", "rocm"} {
		rt, err := devrt.Get(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := rt.(streamQuerier); !ok {
			t.Errorf("the %s runtime has no StreamQuery", v)
		}
	}
}
