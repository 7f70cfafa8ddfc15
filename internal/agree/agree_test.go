package agree

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func rec(s string) *Record {
	var r Record
	copy(r[:], s)
	return &r
}

func describe(r Record) string { return strings.TrimRight(string(r[:]), "\x00") }

// settleAll runs one call of every rank's record through its Agreement, as a
// communicator's exchange would, and returns each rank's verdict.
func settleAll(as []*Agreement, recs []*Record) (calls []Call, needs []bool, errs []error) {
	w := len(as)
	all := make([]byte, w*ProposalSize)
	calls, needs, errs = make([]Call, w), make([]bool, w), make([]error, w)
	for p, a := range as {
		calls[p], needs[p] = a.Begin(recs[p])
		Proposal(all[p*ProposalSize:], calls[p], recs[p])
	}
	for p, a := range as {
		if needs[p] {
			errs[p] = a.Settle(p, calls[p], recs[p], all)
		}
	}
	return calls, needs, errs
}

func group(w int, cfg Config) []*Agreement {
	as := make([]*Agreement, w)
	for i := range as {
		as[i] = New(cfg)
	}
	return as
}

func same(w int, r *Record) []*Record {
	out := make([]*Record, w)
	for i := range out {
		out[i] = r
	}
	return out
}

func TestCallsNumberedAndAgreedOnce(t *testing.T) {
	as := group(3, Config{Describe: describe})
	a, b := rec("AllReduce(fp32, 1024)"), rec("Barrier")
	for i, step := range []struct {
		r    *Record
		need bool
	}{{a, true}, {a, false}, {b, true}, {a, false}, {b, false}, {b, false}} {
		calls, needs, errs := settleAll(as, same(3, step.r))
		for p := range as {
			if errs[p] != nil {
				t.Fatalf("call %d rank %d: %v", i+1, p, errs[p])
			}
			if calls[p].Seq != uint64(i+1) || calls[p].Hash != Hash(step.r) || needs[p] != step.need {
				t.Fatalf("call %d rank %d: %+v need=%v, want seq %d hash %#x need=%v", i+1, p, calls[p], needs[p], i+1, Hash(step.r), step.need)
			}
		}
	}
	if as[0].Exchanges() != 2 || as[0].Agreed() != 2 || as[0].Seq() != 6 {
		t.Fatalf("exchanges %d agreed %d seq %d", as[0].Exchanges(), as[0].Agreed(), as[0].Seq())
	}
}

func TestSettleNamesEveryDifferingRank(t *testing.T) {
	as := group(4, Config{Describe: describe})
	x, y := rec("AllReduce(fp32, 1843427)"), rec("AllReduce(bf16, 3686854)")
	_, _, errs := settleAll(as, []*Record{x, y, x, y})
	for p, err := range errs {
		var me *MismatchError
		if !errors.Is(err, ErrMismatch) || !errors.As(err, &me) {
			t.Fatalf("rank %d: %v", p, err)
		}
		if len(me.Peers) != 2 {
			t.Fatalf("rank %d names %d ranks: %v", p, len(me.Peers), err)
		}
		other := "rank 1 called AllReduce(bf16, 3686854) as call 1; rank 3 called AllReduce(bf16, 3686854) as call 1"
		if p%2 == 1 {
			other = "rank 0 called AllReduce(fp32, 1843427) as call 1; rank 2 called AllReduce(fp32, 1843427) as call 1"
		}
		if !strings.Contains(err.Error(), other) {
			t.Fatalf("rank %d: %v\nwant %q", p, err, other)
		}
	}
	// Nothing was agreed.
	for _, a := range as {
		if a.Agreed() != 0 {
			t.Fatal("a disagreed record was cached")
		}
	}
}

func TestSettleSeesSequenceDifference(t *testing.T) {
	as := group(2, Config{Describe: describe})
	r := rec("Barrier")
	as[1].Begin(rec("AllReduce")) // rank 1 ran one call more (its exchange never met rank 0's)
	_, _, errs := settleAll(as, same(2, r))
	if !strings.Contains(errs[0].Error(), "rank 1 called Barrier as call 2 (1 call ahead of this rank)") ||
		!strings.Contains(errs[1].Error(), "rank 0 called Barrier as call 1 (1 call behind this rank)") {
		t.Fatalf("\n%v\n%v", errs[0], errs[1])
	}
}

func TestSettleUnreadableProposal(t *testing.T) {
	a := New(Config{})
	r := rec("x")
	c, _ := a.Begin(r)
	all := make([]byte, 2*ProposalSize)
	Proposal(all, c, r)
	err := a.Settle(0, c, r, all) // rank 1's proposal is zeros
	if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "rank 1 called an unreadable signature record") {
		t.Fatal(err)
	}
}

// Two records whose hashes collide: the second is never cached, so it is
// compared on every call, and the two can never be confused by hash.
func TestCollidingHashIsNeverCached(t *testing.T) {
	as := group(2, Config{Describe: describe})
	for _, a := range as {
		a.hash = func(Record) uint64 { return 42 }
	}
	x, y := rec("X"), rec("Y")
	for i, step := range []struct {
		r    *Record
		need bool
	}{{x, true}, {y, true}, {x, false}, {y, true}, {y, true}} {
		_, needs, errs := settleAll(as, same(2, step.r))
		for p := range as {
			if errs[p] != nil || needs[p] != step.need {
				t.Fatalf("step %d rank %d: need=%v err=%v, want need=%v", i, p, needs[p], errs[p], step.need)
			}
		}
	}
	if as[0].Collisions() != 3 || as[0].Agreed() != 1 {
		t.Fatalf("collisions %d agreed %d", as[0].Collisions(), as[0].Agreed())
	}
	// Rank 0 runs the cached X, rank 1 the colliding Y: Y needs an
	// exchange, so the two calls differ on the wire.
	c0, n0 := as[0].Begin(x)
	c1, n1 := as[1].Begin(y)
	if n0 || !n1 || c0.Seq != c1.Seq {
		t.Fatalf("x %+v %v, y %+v %v", c0, n0, c1, n1)
	}
}

func TestCacheBoundedAndIdentical(t *testing.T) {
	as := group(2, Config{Describe: describe, MaxAgreed: 3})
	for i := 0; i < 7; i++ {
		if _, _, errs := settleAll(as, same(2, rec(fmt.Sprint(i)))); errs[0] != nil || errs[1] != nil {
			t.Fatal(errs)
		}
	}
	if as[0].Agreed() != 1 || as[1].Agreed() != 1 { // cleared at 3 and 6
		t.Fatalf("agreed %d %d", as[0].Agreed(), as[1].Agreed())
	}
	if _, need := as[0].Begin(rec("6")); need {
		t.Fatal("the record agreed after the clear is not cached")
	}
	if _, need := as[0].Begin(rec("0")); !need {
		t.Fatal("a record from before the clear is still cached")
	}
}

func TestPeerDescription(t *testing.T) {
	as := group(2, Config{Describe: describe})
	x := rec("AllGather(fp32, 4)")
	settleAll(as, same(2, x))
	a := as[0]
	mine, _ := a.Begin(x)
	cases := []struct {
		peer       Call
		exchanging bool
		want       string
	}{
		{Call{Seq: mine.Seq, Hash: Hash(x)}, false, "rank 1 called AllGather(fp32, 4) as call 2"},
		{Call{Seq: mine.Seq + 3, Hash: Hash(x)}, false, "rank 1 called AllGather(fp32, 4) as call 5 (3 calls ahead of this rank)"},
		{Call{Seq: mine.Seq - 1}, true, "rank 1 called a collective it had not called before (its signature was being compared) as call 1 (1 call behind this rank)"},
		{Call{Seq: mine.Seq, Hash: 7}, false, "rank 1 called a collective unknown here (signature hash 0x0000000000000007) as call 2"},
	}
	for _, cs := range cases {
		err := a.TagMismatch(0, mine, rec("AllReduce"), a.Peer(1, cs.peer, cs.exchanging), errors.New("tag"))
		if !errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), cs.want) ||
			!strings.HasPrefix(err.Error(), "ranks called mismatched collectives: rank 0 called AllReduce as call 2; ") {
			t.Errorf("got %v\nwant %q", err, cs.want)
		}
	}
}

func TestBeginDoesNotAllocate(t *testing.T) {
	as := group(1, Config{})
	x, y := rec("x"), rec("y")
	settleAll(as, []*Record{x})
	settleAll(as, []*Record{y})
	a := as[0]
	if n := testing.AllocsPerRun(100, func() { a.Begin(x); a.Begin(y) }); n != 0 {
		t.Fatalf("%v allocations per Begin pair", n)
	}
}

func TestCompare(t *testing.T) {
	a := New(Config{})
	r := rec("x")
	c, need := a.Begin(r)
	if !need {
		t.Fatal("first sight needs no exchange")
	}
	if err := a.Compare(0, 1, c, r, func(_, _ []byte) error { t.Fatal("all-gather called for one rank"); return nil }); err != nil {
		t.Fatal(err)
	}
	b := New(Config{})
	c, _ = b.Begin(r)
	boom := errors.New("boom")
	if err := b.Compare(1, 3, c, r, func(mine, all []byte) error {
		if len(all) != 3*ProposalSize || &mine[0] != &all[ProposalSize] {
			t.Fatalf("mine is not rank 1's slot of all")
		}
		return boom
	}); err != boom {
		t.Fatalf("all-gather error not returned as is: %v", err)
	}
	if b.Agreed() != 0 {
		t.Fatal("a failed exchange cached the record")
	}
}

// A collision of the folded 32-bit hash alone also keeps the record out of
// the cache, so a 32-bit channel (the device flags) cannot confuse them.
func TestFoldedCollisionIsNeverCached(t *testing.T) {
	as := group(2, Config{})
	// x folds to 1 (0 is mapped to 1), y folds to 1 too, full hashes differ.
	hashes := map[string]uint64{"x": 0x0000000100000001, "y": 0}
	for _, a := range as {
		a.hash = func(r Record) uint64 { return hashes[describe(r)] }
	}
	if Fold32(hashes["x"]) != Fold32(hashes["y"]) || hashes["x"] == hashes["y"] {
		t.Fatal("bad test hashes")
	}
	settleAll(as, same(2, rec("x")))
	settleAll(as, same(2, rec("y")))
	if _, need := as[0].Begin(rec("y")); !need || as[0].Collisions() != 1 {
		t.Fatalf("need=%v collisions=%d", need, as[0].Collisions())
	}
	if _, need := as[0].Begin(rec("x")); need {
		t.Fatal("x lost its cache entry")
	}
}

func TestFold32NeverZero(t *testing.T) {
	for _, h := range []uint64{0, 0xFFFFFFFFFFFFFFFF, 0x1234567812345678} {
		if Fold32(h) == 0 {
			t.Fatalf("Fold32(%#x) = 0", h)
		}
	}
	if Fold32(0x00000000DEADBEEF) != 0xDEADBEEF {
		t.Fatal("Fold32 is not the xor of the halves")
	}
}

// Unfold recovers a call from the 32 bits of its number and the fold of its
// hash that the device flags carry: the nearest call number (also across a
// 2³² boundary), the agreed record that owns the fold, or "unknown".
func TestUnfold(t *testing.T) {
	as := group(1, Config{Describe: describe})
	x := rec("AllReduce(fp32, 8)")
	settleAll(as, same(1, x))
	a := as[0]
	for _, cs := range []struct {
		at   uint64 // the Agreement's sequence number
		low  uint32 // the low bits on the channel
		want uint64
	}{{5, 5, 5}, {5, 3, 3}, {5, 9, 9}, {1 << 32, 0xFFFFFFFF, 1<<32 - 1}, {1<<32 - 1, 1, 1<<32 + 1}} {
		a.seq = cs.at
		pc := a.Unfold(2, cs.low, Fold32(Hash(x)))
		if pc.Rank != 2 || pc.Call.Seq != cs.want || pc.Call.Hash != Hash(x) || !pc.Known || pc.Desc != "AllReduce(fp32, 8)" {
			t.Errorf("at %d, low %#x: %+v, want call %d of x", cs.at, cs.low, pc, cs.want)
		}
	}
	pc := a.Unfold(1, uint32(a.seq), 0x1234)
	if pc.Known || pc.Call.Hash != 0 || !strings.Contains(pc.Desc, "unknown here (folded signature hash 0x00001234)") {
		t.Errorf("an unowned fold: %+v", pc)
	}
}
