package inproc_test

import (
	"testing"

	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/transport/inproc"
	"github.com/detcoll/detcoll/transport/transporttest"
)

func TestConformance(t *testing.T) {
	transporttest.Run(t, func(t *testing.T, w int) []transport.Transport {
		ts, err := inproc.New(w)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	})
}
