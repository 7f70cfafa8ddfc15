package probefmt

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestLine(t *testing.T) {
	var b strings.Builder
	Line(&b, "NCCL", "2.27.3 (/x/libnccl.so.2)", "ignored")
	Line(&b, "NVRTC", "", "no NVRTC: x")
	Line(&b, "NVIDIA driver", "", "")
	Field(&b, "GPUs", "2")
	want := "NCCL           2.27.3 (/x/libnccl.so.2)\nNVRTC          unavailable: no NVRTC: x\nNVIDIA driver  unknown\nGPUs           2\n"
	if b.String() != want {
		t.Fatalf("got %q\nwant %q", b.String(), want)
	}
}

func TestPeerAccessAndTail(t *testing.T) {
	m, errs := PeerAccess(3, func(i, j int) (bool, error) {
		if i == 2 && j == 0 {
			return false, errors.New("e20")
		}
		return i < j, nil
	})
	if fmt.Sprint(m) != "[[true true true] [false true true] [false false true]]" || fmt.Sprint(errs) != "[e20]" {
		t.Fatalf("matrix %v errors %v", m, errs)
	}
	var b strings.Builder
	Tail(&b, m, append(errs, "e2"))
	if want := "peer access:\n  0: Y Y Y\n  1: . Y Y\n  2: . . Y\nerror: e20\nerror: e2\n"; b.String() != want {
		t.Fatalf("got %q\nwant %q", b.String(), want)
	}
	b.Reset()
	Tail(&b, [][]bool{{true}}, nil) // one GPU: no matrix
	if b.String() != "" {
		t.Fatalf("one GPU: %q", b.String())
	}
	if m, errs := PeerAccess(0, nil); len(m) != 0 || errs != nil {
		t.Fatal("empty")
	}
}
