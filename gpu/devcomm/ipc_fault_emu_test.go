package devcomm

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/internal/agree"
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
					continue
				}
				// Call 1 differs: rank w-1 ran B where the others ran A.
				mine, theirs := ca.sigHash(), cb.sigHash()
				if r == w-1 {
					mine, theirs = theirs, mine
				}
				checkMismatchRecord(t, label, e, r, 1, mine, 1, theirs)
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

// checkMismatchRecord checks rank r's mismatch record: it ran call number
// call with folded hash sig and met a differing peer (rank w-1 for the
// others, any other rank for w-1) whose line said peerCall and peerSig.
func checkMismatchRecord(t *testing.T, label string, e *emuRun, r int, call, sig, peerCall, peerSig uint32) {
	t.Helper()
	wd := e.words[r]
	peer := int(wd[ipcHostPeer/4]) - 1
	if peer < 0 || peer >= e.w || peer == r || (r != e.w-1 && peer != e.w-1) {
		t.Errorf("%s: rank %d's record names peer %d", label, r, peer)
	}
	if wd[ipcHostCall/4] != call || wd[ipcHostSig/4] != sig || wd[ipcHostPeerCall/4] != peerCall || wd[ipcHostPeerSig/4] != peerSig {
		t.Errorf("%s: rank %d recorded own call %d sig %#x, peer call %d sig %#x; want %d %#x, %d %#x", label, r,
			wd[ipcHostCall/4], wd[ipcHostSig/4], wd[ipcHostPeerCall/4], wd[ipcHostPeerSig/4], call, sig, peerCall, peerSig)
	}
}

// TestIPCCallNumberMismatchOnHost: the same collectives in the same order,
// but rank w-1 made one call more before them that launched no
// peer-memory kernel (a count-0 or NCCL-path call), so its call numbers
// are one ahead: the hash alone would pair the calls and return success;
// the call number in the flags makes every rank record the mismatch, with
// both calls, before the timeout. The record becomes the host's
// *agree.MismatchError naming the distance. A call number repeated on
// every rank (a graph replayed everywhere) passes.
func TestIPCCallNumberMismatchOnHost(t *testing.T) {
	bin := buildIPCEmulator(t)
	for _, w := range []int{2, 3} {
		for _, op := range []ipcOp{ipcAR1LL, ipcAR2, ipcAG} {
			timeout := 5 * time.Second
			label := fmt.Sprintf("W=%d %v", w, op)
			e := &emuRun{w: w, nt: 16, timeout: timeout, deadRank: -1,
				geom: ipcGeom{w: w, capacity: 1 << 16, maxBlocks: 3, blockBytes: 1024}}
			for i := 0; i < 2; i++ {
				e.colls = append(e.colls, &emuColl{op: op, dt: dtype.FP32, count: 700, lagRank: -1, in: emuInputs(op, dtype.FP32, w, 700, uint64(i))})
			}
			e.calls = make([][]int, w)
			for r := range e.calls {
				e.calls[r] = []int{4, 5}
			}
			e.calls[w-1] = []int{5, 6}
			e.run(t, bin)
			sig := e.colls[0].sigHash()
			for r, v := range e.errs {
				if v != 4 {
					t.Errorf("%s: rank %d recorded error %d, want 4 (mismatch); errors %v", label, r, v, e.errs)
					continue
				}
				call, peerCall := uint32(4), uint32(5)
				if r == w-1 {
					call, peerCall = 5, 4
				}
				checkMismatchRecord(t, label, e, r, call, sig, peerCall, sig)
			}
			if e.elapsed > timeout {
				t.Errorf("%s: took %v: found by the timeout, not the call number", label, e.elapsed)
			}
			// The host's error from rank 0's record, its agreement at call
			// 5 with the collective agreed.
			c := &Comm{rank: 0, size: w, agree: newAgreement()}
			rec := signature{op: collOp(op) + 1, dt: uint8(dtype.FP32), count: 700}.record()
			for i := 0; i < 5; i++ {
				call, need := c.agree.Begin(&rec)
				if need {
					all := make([]byte, w*agree.ProposalSize)
					for p := 0; p < w; p++ {
						agree.Proposal(all[p*agree.ProposalSize:], call, &rec)
					}
					must(t, c.agree.Settle(0, call, &rec, all))
				}
			}
			wd := e.words[0]
			err := c.ipcMismatchError(ipcMismatch{peer: int(wd[2]) - 1, peerCall: wd[3], peerSig: wd[4], call: wd[5], sig: wd[6]})
			var me *agree.MismatchError
			if !errors.As(err, &me) || !errors.Is(err, detcoll.ErrMismatch) || me.Mine.Seq != 4 || me.Peers[0].Call.Seq != 5 ||
				!strings.Contains(err.Error(), "as call 5 (1 call ahead of this rank)") {
				t.Errorf("%s: rank 0's error %v", label, err)
			}
			// Control: the numbers agree (also when repeated, as graph
			// replays carry the numbers of their capture).
			for r := range e.calls {
				e.calls[r] = []int{7, 7}
			}
			e.run(t, bin)
			e.check(t, label+" (same numbers)")
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
	st := &ipcState{host: devrt.HostMem{Bytes: make([]byte, ipcHostBytes)}, timeout: time.Second}
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
