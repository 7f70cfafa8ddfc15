// Package tree is the schedule layer: the fixed reduction tree of
// docs/contract.md, "The tree" and the shard and lane offsets every algorithm uses.
// Everything here is a pure function of its arguments.
package tree

// Pair is one addition of the tree: slot Dst receives add(slot Left, slot Right).
// Slots are numbered by rank at level 0; at every level the pair (2i, 2i+1)
// lands in slot i, and an odd last slot is carried up unchanged (Carry).
type Pair struct {
	Dst, Left, Right int
}

// Level is one level of the tree: its additions and, when the number of
// values is odd, the slot carried up unchanged (-1 when none) and where it lands.
type Level struct {
	Pairs     []Pair
	Carry     int // slot carried unchanged, or -1
	CarryDst  int // where the carried slot lands
	NumInputs int // number of values entering this level
}

// Levels returns the levels of the tree over w values, bottom-up. w <= 1
// gives no levels. Slot i of the next level is add(2i, 2i+1), in place: Dst
// never exceeds Left, so the levels may be evaluated in one array of w slots.
func Levels(w int) []Level {
	var out []Level
	for n := w; n > 1; n = (n + 1) / 2 {
		l := Level{Carry: -1, CarryDst: -1, NumInputs: n}
		for i := 0; 2*i+1 < n; i++ {
			l.Pairs = append(l.Pairs, Pair{Dst: i, Left: 2 * i, Right: 2*i + 1})
		}
		if n%2 == 1 {
			l.Carry, l.CarryDst = n-1, n/2
		}
		out = append(out, l)
	}
	return out
}

// Expr returns the parenthesised expression of the tree over w ranks, e.g.
// "((r0+r1)+(r2+r3))" for w = 4; it documents and tests the shape.
func Expr(w int) string {
	if w < 1 {
		return ""
	}
	v := make([]string, w)
	for i := range v {
		v[i] = "r" + itoa(i)
	}
	for _, l := range Levels(w) {
		for _, p := range l.Pairs {
			v[p.Dst] = "(" + v[p.Left] + "+" + v[p.Right] + ")"
		}
		if l.Carry >= 0 {
			v[l.CarryDst] = v[l.Carry]
		}
	}
	return v[0]
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	n := len(b)
	for i > 0 {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
	}
	return string(b[n:])
}

// Shard returns the element offset and length of shard r when count elements
// are split over w ranks as evenly as possible: the first count%w shards get
// one extra element. Shards are contiguous and in rank order.
func Shard(count, w, r int) (off, n int) {
	q, rem := count/w, count%w
	if r < rem {
		return r * (q + 1), q + 1
	}
	return rem*(q+1) + (r-rem)*q, q
}

// Step is one level of the tree as rank r takes part in it when every rank
// evaluates the whole tree (recursive doubling). Before level l every rank
// holds the value of its block of 2^l ranks, [r>>l<<l, (r>>l+1)<<l) cut at
// w; the level adds it to the value of the sibling block (block index xor
// 1), the lower block on the left. A block without a sibling (the odd last
// slot of tree.Levels) is carried: From is -1 and To empty.
type Step struct {
	From int   // the rank of the sibling block whose value r receives, or -1
	To   []int // the ranks of the sibling block that receive r's value
	Left bool  // r's block is the left operand
}

// DoublingSteps returns rank r's steps, one per level of Levels(w). Every
// rank of a block receives from the rank of the sibling block at the same
// offset, or from the sibling's last rank when the sibling is shorter; so
// every rank receives at most once per level and a rank of a short block
// may send to several.
func DoublingSteps(w, r int) []Step {
	var out []Step
	for l := 0; 1<<l < w; l++ {
		out = append(out, doublingStep(w, r, l))
	}
	return out
}

func doublingStep(w, r, l int) Step {
	size := 1 << l
	block := r >> l
	sib := block ^ 1
	if sib<<l >= w {
		return Step{From: -1}
	}
	st := Step{From: sourceIn(w, sib, r&(size-1), l), Left: block < sib}
	for p := sib << l; p < min((sib+1)<<l, w); p++ {
		if sourceIn(w, block, p&(size-1), l) == r {
			st.To = append(st.To, p)
		}
	}
	return st
}

// sourceIn is the rank of block b (at level l) that serves offset off.
func sourceIn(w, b, off, l int) int {
	return min(b<<l+off, w-1)
}

// HalvingStep is one level of recursive halving as rank r takes part in it
// at W = 2^k: r and Peer (r xor 2^l) hold the same element range, each
// the value of its own block of 2^l ranks over it; r keeps one half
// (Keep) and sends the other (Give), then adds the peer's value of Keep to
// its own, its block on the left when Left. The range before level l is
// split at its middle, the lower half to the rank whose bit l is 0 (the
// lower half takes the odd element). After the last level r holds the
// tree's value of Keep; running the levels backwards, sending Keep and
// receiving Give, all-gathers the ranges (halving and doubling,
// Rabenseifner's all-reduce in the tree's order).
type HalvingStep struct {
	Peer       int
	Keep, Give [2]int // element ranges [lo, hi)
	Left       bool
}

// HalvingSteps returns rank r's levels over count elements; w must be a
// power of two (other w return nil).
func HalvingSteps(count, w, r int) []HalvingStep {
	if w < 1 || w&(w-1) != 0 {
		return nil
	}
	var out []HalvingStep
	lo, hi := 0, count
	for l := 0; 1<<l < w; l++ {
		mid := lo + (hi-lo+1)/2
		st := HalvingStep{Peer: r ^ 1<<l, Left: r>>l&1 == 0}
		if st.Left {
			st.Keep, st.Give = [2]int{lo, mid}, [2]int{mid, hi}
		} else {
			st.Keep, st.Give = [2]int{mid, hi}, [2]int{lo, mid}
		}
		out = append(out, st)
		lo, hi = st.Keep[0], st.Keep[1]
	}
	return out
}

// HalvingPosition is where rank r's range ends up after the last level of
// HalvingSteps(w, w, r): the position, counted in w equal parts of the
// range, that r keeps. Bit l of r picks the half at level l, so it is r
// with its log2 w bits reversed. A reduce-scatter puts block r at that
// position and ends with block r. Reversing the bits is its own inverse,
// so the block at position p is HalvingPosition(w, p). w must be a power of
// two; other w give -1.
func HalvingPosition(w, r int) int {
	if w < 1 || w&(w-1) != 0 || r < 0 || r >= w {
		return -1
	}
	pos := 0
	for b := 1; b < w; b <<= 1 {
		pos <<= 1
		if r&b != 0 {
			pos |= 1
		}
	}
	return pos
}
