package devcomm

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu/devrt"
	"github.com/detcoll/detcoll/internal/agree"
)

// The device communicator's agreement is internal/agree's, as the host
// Comm's is: records, call numbers, the exchange over the host
// sub-communicator, and *agree.MismatchError from both the exchange and the
// peer-memory kernels. No GPU: fakeRT devices (wait_test.go) and count-0
// calls, which are numbered and agreed but enqueue nothing.

// TestSignatureRecord: a signature is the first sigBytes of its record (the
// rest zero) and comes back from it; the two signatures whose seed 24-bit
// hashes collided (issue 14 item 2) differ in the full and the folded hash;
// numbering a call allocates nothing.
func TestSignatureRecord(t *testing.T) {
	s := signature{op: opReduceScatterMany, dt: uint8(dtype.BF16), acc: 1, alg: 2, gather: 1, lanes: 3, count: 1<<40 + 5, laneHash: laneHash([]int{1, 2, 3}), chunk: 64 << 20}
	r := s.record()
	if got := decodeSig(r); got != s {
		t.Fatalf("decode(record(%v)) = %v", s, got)
	}
	for i, b := range r[sigBytes:] {
		if b != 0 {
			t.Fatalf("record byte %d beyond the signature is %#x", sigBytes+i, b)
		}
	}
	if laneHash([]int{1, 2}) == laneHash([]int{2, 1}) {
		t.Error("lane hash ignores the order")
	}
	if s.String() == "" {
		t.Error("empty signature string")
	}
	a := signature{op: opAllReduce, dt: uint8(dtype.FP32), count: 1843427}.record()
	b := signature{op: opAllReduce, dt: uint8(dtype.BF16), count: 3686854}.record()
	if agree.Hash(&a) == agree.Hash(&b) || agree.Fold32(agree.Hash(&a)) == agree.Fold32(agree.Hash(&b)) {
		t.Fatal("two signatures share a hash")
	}
	ag := newAgreement()
	if n := testing.AllocsPerRun(100, func() {
		rec := s.record()
		ag.Begin(&rec)
	}); n != 0 {
		t.Fatalf("numbering a call allocates %v times", n)
	}
}

// fakeGroup is W communicators on fakeRT (no NCCL, no peer memory) over
// one in-process host group, so the agreement's exchange is real.
func fakeGroup(t *testing.T, w int) []*Comm {
	t.Helper()
	hosts, err := detcoll.NewInProc(w)
	if err != nil {
		t.Fatal(err)
	}
	cs := make([]*Comm, w)
	for r := range cs {
		c, _ := fakeComm(t, time.Minute)
		c.rank, c.size, c.host = r, w, hosts[r]
		cs[r] = c
		t.Cleanup(func() { hosts[r].Close() })
	}
	return cs
}

// step is one call of a rank's script.
type step func(ctx context.Context, c *Comm) error

func arStep(dt dtype.DType) step {
	return func(ctx context.Context, c *Comm) error { return c.AllReduce(ctx, Buffer{}, Buffer{}, 0, dt) }
}

func agStep(dt dtype.DType) step {
	return func(ctx context.Context, c *Comm) error { return c.AllGather(ctx, Buffer{}, Buffer{}, 0, dt) }
}

// outcome is where a rank's script stopped: the index of the failing step
// (len(script) when none failed) and its error.
type outcome struct {
	at  int
	err error
}

func runScripts(t *testing.T, cs []*Comm, scripts [][]step) []outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := make([]outcome, len(cs))
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[r].at = len(scripts[r])
			for i, st := range scripts[r] {
				if err := st(ctx, c); err != nil {
					out[r] = outcome{i, err}
					return
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// mismatchOf unpacks a communicator's mismatch error: a *detcoll.Error
// around an *agree.MismatchError, matching detcoll.ErrMismatch.
func mismatchOf(t *testing.T, rank int, err error) (*detcoll.Error, *agree.MismatchError) {
	t.Helper()
	var de *detcoll.Error
	var me *agree.MismatchError
	if !errors.Is(err, detcoll.ErrMismatch) || !errors.As(err, &de) || !errors.As(err, &me) {
		t.Fatalf("rank %d: %v (%T) is not a *detcoll.Error around an *agree.MismatchError", rank, err, err)
	}
	return de, me
}

// TestDeviceMismatchFailsEveryRank: the exchange of the device
// communicator is internal/agree's over the host sub-communicator. A new
// signature on rank 1 where the others call one they validated before:
// the others' validated call carries nothing (on the NCCL path nothing
// does), so they fail at their next exchange and rank 1 in its own, each
// naming the other's call and the distance; both new at the same call
// fail there. Every rank is poisoned afterwards.
func TestDeviceMismatchFailsEveryRank(t *testing.T) {
	const w = 3
	t.Run("new against validated", func(t *testing.T) {
		cs := fakeGroup(t, w)
		others := []step{arStep(dtype.FP32), arStep(dtype.FP32), agStep(dtype.FP32)}
		out := runScripts(t, cs, [][]step{others, {arStep(dtype.FP32), arStep(dtype.BF16)}, others})
		for r, o := range out {
			de, me := mismatchOf(t, r, o.err)
			if r == 1 {
				// Call 2, new on rank 1; the others' proposals are their call 3.
				if o.at != 1 || de.Peer != 0 || me.Rank != 1 || me.Mine.Seq != 2 || len(me.Peers) != 2 {
					t.Fatalf("rank 1 failed at step %d: %v (%+v)", o.at, o.err, me)
				}
				for i, p := range me.Peers {
					if p.Rank != []int{0, 2}[i] || p.Call.Seq != 3 || !p.Known || !strings.HasPrefix(p.Desc, "AllGather(count=0, dtype=fp32") {
						t.Errorf("rank 1's peer %d: %+v", i, p)
					}
				}
				if !strings.Contains(o.err.Error(), "as call 3 (1 call ahead of this rank)") {
					t.Errorf("rank 1: %v does not give the distance", o.err)
				}
				continue
			}
			if o.at != 2 || de.Peer != 1 || me.Rank != r || me.Mine.Seq != 3 || len(me.Peers) != 1 {
				t.Fatalf("rank %d failed at step %d: %v (%+v)", r, o.at, o.err, me)
			}
			if p := me.Peers[0]; p.Rank != 1 || p.Call.Seq != 2 || !strings.HasPrefix(p.Desc, "AllReduce(count=0, dtype=bf16") {
				t.Errorf("rank %d's peer: %+v", r, p)
			}
			if !strings.Contains(o.err.Error(), "as call 2 (1 call behind this rank)") {
				t.Errorf("rank %d: %v does not give the distance", r, o.err)
			}
		}
		for r, c := range cs {
			if err := arStep(dtype.FP32)(context.Background(), c); !errors.Is(err, detcoll.ErrPoisoned) || !errors.Is(err, detcoll.ErrMismatch) {
				t.Errorf("rank %d: a call after the mismatch = %v, want ErrPoisoned wrapping ErrMismatch", r, err)
			}
		}
	})
	t.Run("new against new", func(t *testing.T) {
		cs := fakeGroup(t, w)
		others := []step{arStep(dtype.FP32), agStep(dtype.FP32)}
		out := runScripts(t, cs, [][]step{others, {arStep(dtype.FP32), arStep(dtype.BF16)}, others})
		for r, o := range out {
			de, me := mismatchOf(t, r, o.err)
			if o.at != 1 || me.Rank != r || me.Mine.Seq != 2 {
				t.Fatalf("rank %d failed at step %d: %v", r, o.at, o.err)
			}
			want := 1
			if r == 1 {
				want = 0
			}
			if de.Peer != want || me.Peers[0].Rank != want || me.Peers[0].Call.Seq != 2 {
				t.Errorf("rank %d names %+v (peer %d), want rank %d at call 2", r, me.Peers, de.Peer, want)
			}
		}
	})
	t.Run("validated calls exchange nothing", func(t *testing.T) {
		cs := fakeGroup(t, w)
		s := []step{arStep(dtype.FP32), agStep(dtype.FP32), arStep(dtype.FP32), agStep(dtype.FP32), arStep(dtype.FP32)}
		out := runScripts(t, cs, [][]step{s, s, s})
		for r, o := range out {
			if o.err != nil {
				t.Fatalf("rank %d: %v", r, o.err)
			}
			if st := cs[r].Stats(); st.SignatureExchanges != 2 || cs[r].agree.Seq() != 5 {
				t.Errorf("rank %d: %d exchanges after 5 calls, sequence %d; want 2 and 5", r, st.SignatureExchanges, cs[r].agree.Seq())
			}
		}
	})
}

// TestRefusedCallIsNotNumbered: a call refused before it is numbered (an
// argument error, a cancelled context) leaves the sequence alone and the
// communicator usable.
func TestRefusedCallIsNotNumbered(t *testing.T) {
	c, _ := fakeComm(t, time.Minute)
	if err := c.AllReduce(context.Background(), Buffer{}, Buffer{}, -1, dtype.FP32); !errors.Is(err, detcoll.ErrInvalidArgument) {
		t.Fatalf("negative count: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.AllReduce(ctx, Buffer{}, Buffer{}, 0, dtype.FP32); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled context: %v", err)
	}
	if c.agree.Seq() != 0 || c.Err() != nil {
		t.Fatalf("sequence %d, poison %v after refused calls", c.agree.Seq(), c.Err())
	}
	if err := c.AllReduce(context.Background(), Buffer{}, Buffer{}, 0, dtype.FP32); err != nil || c.agree.Seq() != 1 {
		t.Fatalf("a good call after the refused ones: %v, sequence %d", err, c.agree.Seq())
	}
}

// TestIPCMismatchIsAgreeError: the mismatch record a peer-memory kernel
// leaves in the host words becomes, at the next call, an
// *agree.MismatchError naming this rank's call and the peer's from the
// agreed records (the fold of the hash and the low 32 bits of the call
// number are all the flags carry), with ErrIPCMismatch as its cause, and
// poisons the communicator.
func TestIPCMismatchIsAgreeError(t *testing.T) {
	a := signature{op: opAllReduce, dt: uint8(dtype.FP32), alg: uint8(detcoll.OneShot), count: 700}.record()
	b := signature{op: opAllReduce, dt: uint8(dtype.BF16), alg: uint8(detcoll.OneShot), count: 700}.record()
	for _, cs := range []struct {
		name           string
		peerCall       uint32
		peerSig        uint32
		want, wantNot  string
		peerSeq        uint64
		peerKnownAsRec *agree.Record
	}{
		{"another collective", 2, agree.Fold32(agree.Hash(&b)), "rank 2 called AllReduce(count=700, dtype=bf16", "ahead", 2, &b},
		{"another call number", 3, agree.Fold32(agree.Hash(&a)), "rank 2 called AllReduce(count=700, dtype=fp32, accumulate=native, algorithm=one_shot, gather=auto, chunk=0) as call 3 (1 call ahead of this rank)", "bf16", 3, &a},
		{"an unknown collective", 2, 0x1234, "rank 2 called a collective unknown here (folded signature hash 0x00001234) as call 2", "ahead", 2, nil},
	} {
		t.Run(cs.name, func(t *testing.T) {
			c, rt := fakeComm(t, time.Minute)
			c.rank, c.size = 0, 3
			// Agree on a and b as calls 1 and 2 (every rank proposed the same).
			for _, r := range []*agree.Record{&a, &b} {
				call, need := c.agree.Begin(r)
				all := make([]byte, 3*agree.ProposalSize)
				for p := 0; p < 3; p++ {
					agree.Proposal(all[p*agree.ProposalSize:], call, r)
				}
				if err := c.agree.Settle(0, call, r, all); !need || err != nil {
					t.Fatal(need, err)
				}
			}
			st := &ipcState{rt: rt, host: devrt.HostMem{Bytes: make([]byte, ipcHostBytes)}, timeout: time.Second}
			c.ipc = st
			// The kernel of rank 0's call 2 ran a and met rank 2's line.
			*st.word(ipcHostPeer) = 2 + 1
			*st.word(ipcHostPeerCall), *st.word(ipcHostPeerSig) = cs.peerCall, cs.peerSig
			*st.word(ipcHostCall), *st.word(ipcHostSig) = 2, agree.Fold32(agree.Hash(&a))
			*st.word(ipcHostErr) = 4
			err := c.AllReduce(context.Background(), Buffer{}, Buffer{}, 0, dtype.FP32)
			de, me := mismatchOf(t, 0, err)
			if !errors.Is(err, ErrIPCMismatch) || de.Peer != 2 || me.Rank != 0 || me.Cause != ErrIPCMismatch {
				t.Fatalf("%v: peer %d, rank %d, cause %v", err, de.Peer, me.Rank, me.Cause)
			}
			if me.Mine != (agree.Call{Seq: 2, Hash: agree.Hash(&a)}) || !strings.HasPrefix(me.MineDesc, "AllReduce(count=700, dtype=fp32") {
				t.Errorf("this rank's call: %+v %q", me.Mine, me.MineDesc)
			}
			p := me.Peers[0]
			if len(me.Peers) != 1 || p.Rank != 2 || p.Call.Seq != cs.peerSeq || (cs.peerKnownAsRec != nil) != p.Known ||
				(cs.peerKnownAsRec != nil && p.Call.Hash != agree.Hash(cs.peerKnownAsRec)) {
				t.Errorf("the peer's call: %+v", me.Peers)
			}
			if msg := err.Error(); !strings.Contains(msg, cs.want) || strings.Contains(msg, cs.wantNot) ||
				!strings.Contains(msg, "rank 0 called AllReduce(count=700, dtype=fp32") || !strings.Contains(msg, ErrIPCMismatch.Error()) {
				t.Errorf("message %q, want %q", msg, cs.want)
			}
			if !errors.Is(c.Err(), detcoll.ErrMismatch) {
				t.Errorf("not poisoned with the mismatch: %v", c.Err())
			}
		})
	}
}
