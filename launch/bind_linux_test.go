package launch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Workers are bound to their share of the launcher's CPUs as BindTo says,
// and bound workers learn how many CPUs the node's workers share.
func TestRunBindsWorkers(t *testing.T) {
	saved := claimsPath
	defer func() { claimsPath = saved }()
	claims := filepath.Join(t.TempDir(), "claims") // no other job's claims
	claimsPath = func() string { return claims }
	runtime.LockOSThread()
	allowed, err := allowedCPUs()
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	n := len(allowed)
	over := min(n+1, 17) // outnumbers the CPUs, or 17 of a larger host's
	type bindCase struct {
		b     Binding
		nproc int
		env   []string
		node  string // DETCOLL_NODE_CPUS the workers see; "" for unbound
	}
	cases := []bindCase{
		{BindAuto, 1, nil, ""},
		{BindNone, over, nil, ""},
		{BindCore, 1, nil, strconv.Itoa(n)},
		{BindCore, 2, nil, strconv.Itoa(n)},
		{BindCore, 3, []string{EnvNodeCPUs + "=7"}, "7"}, // the environment's is kept
	}
	if over > n {
		cases = append(cases, bindCase{BindAuto, over, nil, strconv.Itoa(n)})
	}
	for _, c := range cases {
		cfg, stdout, _ := testConfig(t, c.nproc, "affinity", c.env...)
		cfg.BindTo = c.b
		if err, _ := runWithin(t, context.Background(), cfg, 60*time.Second); err != nil {
			t.Fatalf("%q, %d workers: %v", c.b, c.nproc, err)
		}
		for l := range c.nproc {
			want := allowed
			switch {
			case c.node != "" && c.nproc > n:
				want = []int{allowed[l%n]} // round robin: no other job's claims
			case c.node != "":
				want = workerCPUs(allowed, c.nproc, l)
			}
			line := fmt.Sprintf("[rank %d] cpus=%v err=<nil> node=%s set=%v\n", l, want, c.node, c.node != "")
			if !strings.Contains(stdout.String(), line) {
				t.Errorf("%q, %d workers on CPUs %v: want %q in:\n%s", c.b, c.nproc, allowed, line, stdout.String())
			}
		}
	}
	if b, err := os.ReadFile(claims); err != nil || len(b) != 0 {
		t.Errorf("claims left after the jobs ended: %q (%v)", b, err)
	}
	// The starting thread's own mask was put back.
	runtime.LockOSThread()
	after, err := allowedCPUs()
	runtime.UnlockOSThread()
	if err != nil || !slices.Equal(after, allowed) {
		t.Errorf("after Run: CPUs %v (%v), want %v", after, err, allowed)
	}
}
