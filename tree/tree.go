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
