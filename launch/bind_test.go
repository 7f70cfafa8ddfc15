package launch

import (
	"slices"
	"testing"
)

func TestParseBinding(t *testing.T) {
	for in, want := range map[string]Binding{"": BindAuto, "auto": BindAuto, " Core ": BindCore, "NONE": BindNone} {
		if got, err := ParseBinding(in); err != nil || got != want {
			t.Errorf("ParseBinding(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"cores", "socket", "1", "none,core"} {
		if got, err := ParseBinding(bad); err == nil {
			t.Errorf("ParseBinding(%q) = %q, want an error", bad, got)
		}
	}
}

func TestBindingBinds(t *testing.T) {
	for _, c := range []struct {
		b           Binding
		nproc, cpus int
		want        bool
	}{
		{"", 4, 2, true},
		{BindAuto, 3, 2, true},
		{BindAuto, 2, 2, false}, // a group that fits is left alone
		{BindAuto, 1, 1, false},
		{BindAuto, 8, 16, false},
		{BindAuto, 4, 0, false}, // no CPUs known
		{BindCore, 1, 16, true},
		{BindCore, 2, 2, true},
		{BindCore, 2, 0, false},
		{BindNone, 8, 2, false},
	} {
		if got := c.b.binds(c.nproc, c.cpus); got != c.want {
			t.Errorf("%q.binds(nproc %d, cpus %d) = %v, want %v", c.b, c.nproc, c.cpus, got, c.want)
		}
	}
}

func TestWorkerCPUs(t *testing.T) {
	for _, c := range []struct {
		allowed []int
		nproc   int
		want    [][]int
	}{
		{[]int{0, 1}, 4, [][]int{{0}, {1}, {0}, {1}}},
		{[]int{0, 1}, 2, [][]int{{0}, {1}}},
		{[]int{0, 1, 2, 3, 4, 5, 6, 7}, 3, [][]int{{0, 1}, {2, 3, 4}, {5, 6, 7}}},
		{[]int{2, 5, 7}, 2, [][]int{{2}, {5, 7}}},
		{[]int{2, 5, 7}, 5, [][]int{{2}, {5}, {7}, {2}, {5}}},
		{[]int{3}, 1, [][]int{{3}}},
	} {
		for l, want := range c.want {
			if got := workerCPUs(c.allowed, c.nproc, l); !slices.Equal(got, want) {
				t.Errorf("workerCPUs(%v, %d, %d) = %v, want %v", c.allowed, c.nproc, l, got, want)
			}
		}
	}
	// Every size: each worker gets CPUs; with no more workers than CPUs the
	// shares are disjoint and cover every CPU; with more, each worker has
	// one CPU and no CPU has two workers more than another.
	for n := 1; n <= 16; n++ {
		allowed := make([]int, n)
		for i := range allowed {
			allowed[i] = 2*i + 1
		}
		for nproc := 1; nproc <= 20; nproc++ {
			count := map[int]int{}
			for l := range nproc {
				got := workerCPUs(allowed, nproc, l)
				if len(got) == 0 || (nproc > n && len(got) != 1) {
					t.Fatalf("n=%d nproc=%d local %d: CPUs %v", n, nproc, l, got)
				}
				for _, c := range got {
					count[c]++
				}
			}
			lo, hi := nproc, 0
			for _, c := range allowed {
				lo, hi = min(lo, count[c]), max(hi, count[c])
			}
			if len(count) != min(n, nproc*n) || lo == 0 || hi-lo > 1 || (nproc <= n && hi != 1) {
				t.Errorf("n=%d nproc=%d: workers per CPU %v", n, nproc, count)
			}
		}
	}
}
