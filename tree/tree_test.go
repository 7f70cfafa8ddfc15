package tree

import "testing"

func TestExpr(t *testing.T) {
	cases := map[int]string{
		1: "r0",
		2: "(r0+r1)",
		3: "((r0+r1)+r2)",
		4: "((r0+r1)+(r2+r3))",
		5: "(((r0+r1)+(r2+r3))+r4)",
		6: "(((r0+r1)+(r2+r3))+(r4+r5))",
		7: "(((r0+r1)+(r2+r3))+((r4+r5)+r6))",
		8: "(((r0+r1)+(r2+r3))+((r4+r5)+(r6+r7)))",
	}
	for w, want := range cases {
		if got := Expr(w); got != want {
			t.Errorf("Expr(%d) = %s, want %s", w, got, want)
		}
	}
}

// The subtree property of docs/contract.md, "The tree": for W = 2^k the tree equals the
// tree over the roots of aligned blocks of 2^j ranks.
func TestSubtreeProperty(t *testing.T) {
	for k := 1; k <= 5; k++ {
		w := 1 << k
		for j := 0; j <= k; j++ {
			b := 1 << j
			inner := Expr(b) // over r0..r(b-1); rename for block m
			roots := make([]string, w/b)
			for m := range roots {
				roots[m] = rename(inner, m*b, b)
			}
			outer := Expr(w / b)
			got := substitute(outer, roots)
			if got != Expr(w) {
				t.Fatalf("w=%d block=%d: %s != %s", w, b, got, Expr(w))
			}
		}
	}
}

// rename shifts every rank index of an expression over b ranks by base.
func rename(e string, base, b int) string {
	out := ""
	for i := 0; i < len(e); {
		if e[i] == 'r' {
			j := i + 1
			n := 0
			for j < len(e) && e[j] >= '0' && e[j] <= '9' {
				n = n*10 + int(e[j]-'0')
				j++
			}
			out += "r" + itoa(n+base)
			i = j
			continue
		}
		out += string(e[i])
		i++
	}
	_ = b
	return out
}

func substitute(e string, vals []string) string {
	out := ""
	for i := 0; i < len(e); {
		if e[i] == 'r' {
			j := i + 1
			n := 0
			for j < len(e) && e[j] >= '0' && e[j] <= '9' {
				n = n*10 + int(e[j]-'0')
				j++
			}
			out += vals[n]
			i = j
			continue
		}
		out += string(e[i])
		i++
	}
	return out
}

func TestShard(t *testing.T) {
	for w := 1; w <= 17; w++ {
		for count := 0; count < 60; count++ {
			next := 0
			for r := 0; r < w; r++ {
				off, n := Shard(count, w, r)
				if off != next || n < count/w || n > count/w+1 {
					t.Fatalf("Shard(%d,%d,%d) = %d,%d", count, w, r, off, n)
				}
				next = off + n
			}
			if next != count {
				t.Fatalf("shards of %d over %d cover %d", count, w, next)
			}
		}
	}
}

func TestLevelsInPlace(t *testing.T) {
	for w := 0; w <= 40; w++ {
		for _, l := range Levels(w) {
			for _, p := range l.Pairs {
				if p.Dst > p.Left || p.Right != p.Left+1 {
					t.Fatalf("w=%d bad pair %+v", w, p)
				}
			}
		}
	}
}

// TestDoublingSteps evaluates the tree symbolically on every rank by
// DoublingSteps and checks that every rank ends with Expr(w), and that
// every send has its matching receive.
func TestDoublingSteps(t *testing.T) {
	for w := 1; w <= 40; w++ {
		v := make([]string, w)
		for r := range v {
			v[r] = "r" + itoa(r)
		}
		steps := make([][]Step, w)
		for r := range steps {
			steps[r] = DoublingSteps(w, r)
			if len(steps[r]) != len(Levels(w)) {
				t.Fatalf("w=%d r=%d: %d steps, want %d", w, r, len(steps[r]), len(Levels(w)))
			}
		}
		for l := range Levels(w) {
			next := make([]string, w)
			for r := 0; r < w; r++ {
				st := steps[r][l]
				if st.From < 0 {
					if len(st.To) != 0 {
						t.Fatalf("w=%d r=%d l=%d: carried but sends to %v", w, r, l, st.To)
					}
					next[r] = v[r]
					continue
				}
				sent := false
				for _, p := range steps[st.From][l].To {
					sent = sent || p == r
				}
				if !sent {
					t.Fatalf("w=%d r=%d l=%d: receives from %d, which does not send to it", w, r, l, st.From)
				}
				if st.Left {
					next[r] = "(" + v[r] + "+" + v[st.From] + ")"
				} else {
					next[r] = "(" + v[st.From] + "+" + v[r] + ")"
				}
			}
			for r := 0; r < w; r++ {
				for _, p := range steps[r][l].To {
					if steps[p][l].From != r {
						t.Fatalf("w=%d r=%d l=%d: sends to %d, which receives from %d", w, r, l, p, steps[p][l].From)
					}
				}
			}
			v = next
		}
		for r := 0; r < w; r++ {
			if v[r] != Expr(w) {
				t.Fatalf("w=%d rank %d ends with %s, want %s", w, r, v[r], Expr(w))
			}
		}
	}
}

// TestHalvingSteps evaluates halving and doubling symbolically per element
// on every rank and checks that every rank ends with Expr(w) everywhere.
func TestHalvingSteps(t *testing.T) {
	for w := 1; w <= 32; w *= 2 {
		for _, count := range []int{0, 1, w - 1, w, w + 1, 37, 3*w + 5} {
			v := make([][]string, w) // rank, element
			for r := range v {
				v[r] = make([]string, count)
				for e := range v[r] {
					v[r][e] = "r" + itoa(r)
				}
			}
			steps := make([][]HalvingStep, w)
			for r := range steps {
				steps[r] = HalvingSteps(count, w, r)
			}
			for l := range Levels(w) {
				next := make([][]string, w)
				for r := 0; r < w; r++ {
					st := steps[r][l]
					ps := steps[st.Peer][l]
					if ps.Peer != r || ps.Keep != st.Give || ps.Give != st.Keep || ps.Left == st.Left {
						t.Fatalf("w=%d count=%d r=%d l=%d: steps %+v and peer's %+v do not match", w, count, r, l, st, ps)
					}
					next[r] = append([]string(nil), v[r]...)
					for e := st.Keep[0]; e < st.Keep[1]; e++ {
						if st.Left {
							next[r][e] = "(" + v[r][e] + "+" + v[st.Peer][e] + ")"
						} else {
							next[r][e] = "(" + v[st.Peer][e] + "+" + v[r][e] + ")"
						}
					}
				}
				v = next
			}
			// The doubling half: backwards, each rank receives its peer's Keep.
			for l := len(Levels(w)) - 1; l >= 0; l-- {
				next := make([][]string, w)
				for r := 0; r < w; r++ {
					st := steps[r][l]
					next[r] = append([]string(nil), v[r]...)
					for e := st.Give[0]; e < st.Give[1]; e++ {
						next[r][e] = v[st.Peer][e]
					}
				}
				v = next
			}
			for r := 0; r < w; r++ {
				for e := 0; e < count; e++ {
					if v[r][e] != Expr(w) {
						t.Fatalf("w=%d count=%d: rank %d element %d is %s, want %s", w, count, r, e, v[r][e], Expr(w))
					}
				}
			}
		}
	}
	if HalvingSteps(10, 6, 0) != nil {
		t.Fatal("HalvingSteps at w = 6 is not nil")
	}
}

// TestHalvingPosition: after the last level of HalvingSteps(w, w, r) rank r
// keeps exactly part HalvingPosition(w, r) of w, and no two ranks keep the
// same part (a reduce-scatter that puts block r there ends with block r).
func TestHalvingPosition(t *testing.T) {
	for w := 1; w <= 64; w *= 2 {
		seen := make([]bool, w)
		for r := 0; r < w; r++ {
			pos := HalvingPosition(w, r)
			if pos < 0 || pos >= w || seen[pos] {
				t.Fatalf("w=%d r=%d: position %d out of range or taken twice", w, r, pos)
			}
			seen[pos] = true
			keep := [2]int{0, w}
			if steps := HalvingSteps(w, w, r); len(steps) > 0 {
				keep = steps[len(steps)-1].Keep
			}
			if keep != [2]int{pos, pos + 1} {
				t.Fatalf("w=%d r=%d: the last level keeps %v, HalvingPosition says %d", w, r, keep, pos)
			}
		}
	}
	for _, c := range []struct{ w, r int }{{3, 0}, {6, 1}, {0, 0}, {4, 4}, {4, -1}} {
		if got := HalvingPosition(c.w, c.r); got != -1 {
			t.Errorf("HalvingPosition(%d, %d) = %d, want -1", c.w, c.r, got)
		}
	}
}
