package devcomm

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu/devrt"
)

// Fault cases of the peer-memory protocol on the host emulator (see
// ipc_emu_test.go): collectives called in different orders, and a peer
// whose process exits.

// TestIPCReorderedIsMismatchOnHost: two collectives that were both
// validated before (the host-side check does not run again) called in a
// different order on two ranks. Before the signature hash was in the
// flags, same-shaped calls paired up and returned each other's data with
// no error; now every rank records DC_IPC_ERR_MISMATCH (ErrMismatch on the
// host) — for same-shaped LL and flag kernels, and for different kernels
// (which would otherwise wait for each other until the timeout).
func TestIPCReorderedIsMismatchOnHost(t *testing.T) {
	bin := buildIPCEmulator(t)
	pairs := []struct {
		name string
		a, b ipcOp
		n    int
	}{
		{"same shape LL", ipcAR1LL, ipcAR1LL, 700},
		{"same shape one-shot", ipcAR1, ipcAR1, 2003},
		{"same shape two-shot", ipcAR2, ipcAR2, 2003},
		{"two-shot against reduce-scatter", ipcAR2, ipcRS, 1009},
		{"LL against plain", ipcAR1LL, ipcAG, 700},
	}
	for _, w := range []int{2, 3} {
		for _, pc := range pairs {
			timeout := 5 * time.Second
			e := &emuRun{w: w, nt: 16, timeout: timeout, deadRank: -1,
				geom: ipcGeom{w: w, capacity: 1 << 16, maxBlocks: 3, blockBytes: 1024}}
			// Two distinct collectives (different signature hashes; A and B
			// differ in the dtype when their kernels are the same).
			ca := &emuColl{op: pc.a, dt: dtype.FP32, count: pc.n, lagRank: -1, in: emuInputs(pc.a, dtype.FP32, w, pc.n, 1)}
			cb := &emuColl{op: pc.b, dt: dtype.FP32, count: pc.n, lagRank: -1, in: emuInputs(pc.b, dtype.FP32, w, pc.n, 2), sig: 0x5eed}
			e.colls = []*emuColl{ca, cb}
			e.order = make([][]int, w)
			for r := range e.order {
				e.order[r] = []int{0, 1}
			}
			e.order[w-1] = []int{1, 0}
			e.run(t, bin)
			label := fmt.Sprintf("W=%d %s", w, pc.name)
			for r, v := range e.errs {
				if v != 4 {
					t.Errorf("%s: rank %d recorded error %d, want 4 (mismatch); errors %v", label, r, v, e.errs)
				}
			}
			if e.elapsed > timeout {
				t.Errorf("%s: took %v: the mismatch was found by the timeout, not the signature", label, e.elapsed)
			}
			// The control: the same calls in the same order pass.
			e.order = nil
			e.run(t, bin)
			e.check(t, label+" (same order)")
		}
	}
}

// TestIPCPeerProcessExitOnHost: the ranks are processes over shared
// memory, and one exits — between collectives, or in the middle of one
// (its data pushed, nothing signalled). Every other rank records the
// timeout within about the timeout, and the later calls return at once.
func TestIPCPeerProcessExitOnHost(t *testing.T) {
	bin := buildIPCEmulator(t)
	const w = 3
	timeout := 300 * time.Millisecond
	for _, mode := range []int{1, 2} {
		e := &emuRun{w: w, nt: 16, timeout: timeout, deadRank: 1, deadColl: 1, procs: true, deadMode: mode,
			geom: ipcGeom{w: w, capacity: 4096, maxBlocks: 2, blockBytes: 512}}
		for i, op := range []ipcOp{ipcAR2, ipcAR1LL, ipcRS, ipcAGLL} {
			e.colls = append(e.colls, &emuColl{op: op, dt: dtype.FP32, count: 600, lagRank: -1, in: emuInputs(op, dtype.FP32, w, 600, uint64(i))})
		}
		e.run(t, bin)
		for r, v := range e.errs {
			want := uint32(1)
			if r == e.deadRank {
				want = 0
			}
			if v != want {
				t.Fatalf("mode %d: rank %d: error word %d, want %d (errors %v)", mode, r, v, want, e.errs)
			}
		}
		if e.elapsed > 6*timeout+2*time.Second {
			t.Fatalf("mode %d: the run took %v with a %v timeout", mode, e.elapsed, timeout)
		}
		t.Logf("peer process exit (mode %d): errors %v after %v", mode, e.errs, e.elapsed.Round(time.Millisecond))
	}
}

// TestIPCErrorWords: the host maps every code a kernel records to its
// error: timeout, abort, and mismatch as detcoll.ErrMismatch.
func TestIPCErrorWords(t *testing.T) {
	st := &ipcState{host: devrt.HostMem{Bytes: make([]byte, 64)}, timeout: time.Second}
	if err := st.failed(); err != nil {
		t.Fatal(err)
	}
	for code, want := range map[uint32]error{1: ErrIPCTimeout, 2: ErrIPCAborted, 4: detcoll.ErrMismatch} {
		*st.word(0) = code
		if err := st.failed(); !errors.Is(err, want) {
			t.Errorf("code %d: %v, want %v", code, err, want)
		}
	}
	*st.word(0) = 4
	if err := st.failed(); !errors.Is(err, ErrIPCMismatch) {
		t.Errorf("code 4: %v does not wrap ErrIPCMismatch", err)
	}
	st.abort()
	if *st.word(4) != 1 {
		t.Error("abort did not set the abort word")
	}
	var nilSt *ipcState
	if nilSt.failed() != nil {
		t.Error("a nil state reports an error")
	}
	nilSt.abort()
}
