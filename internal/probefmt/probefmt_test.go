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

func TestLibraryAndErrs(t *testing.T) {
	never := func() string { t.Error("path of an unloaded library asked"); return "" }
	if v, p, e := Library("NCCL", errors.New("dlopen failed"), never, nil); v != "" || p != "" || e != "no NCCL: dlopen failed" {
		t.Errorf("unloaded: %q %q %q", v, p, e)
	}
	path := func() string { return "/x/libnccl.so.2" }
	if v, p, e := Library("NCCL", nil, path, func() (string, error) { return "2.27.3", nil }); v != "2.27.3" || p != "/x/libnccl.so.2" || e != "" {
		t.Errorf("loaded: %q %q %q", v, p, e)
	}
	if v, p, e := Library("NCCL", nil, path, func() (string, error) { return "0.0.0", errors.New("ncclGetVersion failed") }); v != "" || p != "/x/libnccl.so.2" || e != "ncclGetVersion failed" {
		t.Errorf("no version: %q %q %q", v, p, e)
	}
	var b strings.Builder
	VersionLine(&b, "RCCL", "2.22.3", "/opt/rocm/lib/librccl.so.1", "")
	VersionLine(&b, "hiprtc", "6.4", "", "")
	VersionLine(&b, "CUDA driver", "", "", "no CUDA driver: x")
	if want := "RCCL           2.22.3 (/opt/rocm/lib/librccl.so.1)\nhiprtc         6.4\nCUDA driver    unavailable: no CUDA driver: x\n"; b.String() != want {
		t.Errorf("got %q\nwant %q", b.String(), want)
	}
	var errs Errs
	errs.Note(nil)
	errs.Note(errors.New("a"))
	errs.Note(errors.New("b"))
	if errs.String() != "a; b" || (Errs{}).String() != "" {
		t.Errorf("errs %q", errs.String())
	}
}
