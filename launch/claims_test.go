//go:build linux

package launch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// useClaimsFile points the claims at a file of the test's own.
func useClaimsFile(t *testing.T) string {
	saved := claimsPath
	t.Cleanup(func() { claimsPath = saved })
	p := filepath.Join(t.TempDir(), "claims")
	claimsPath = func() string { return p }
	return p
}

// Concurrent jobs spread over the CPUs; a job alone is round robin; a
// released job's CPUs are free again.
func TestClaimsSpreadJobs(t *testing.T) {
	useClaimsFile(t)
	cpus := []int{0, 1}
	a, b, c := newClaimer(), newClaimer(), newClaimer()
	if got := a.claim(cpus, 3); !slices.Equal(got, []int{0, 1, 0}) {
		t.Fatalf("first job: %v, want [0 1 0]", got)
	}
	if got := b.claim(cpus, 3); !slices.Equal(got, []int{1, 0, 1}) {
		t.Fatalf("second job beside it: %v, want [1 0 1]", got)
	}
	a.release()
	// b holds CPU 1 twice and 0 once.
	if got := c.claim(cpus, 2); !slices.Equal(got, []int{0, 0}) {
		t.Fatalf("third job after the first ended: %v, want [0 0]", got)
	}
	// A restart claims again, replacing its own claims.
	if got := c.claim(cpus, 2); !slices.Equal(got, []int{0, 0}) {
		t.Fatalf("third job again: %v, want [0 0]", got)
	}
	b.release()
	c.release()
	if got := a.claim([]int{4, 5, 6}, 4); !slices.Equal(got, []int{4, 5, 6, 4}) {
		t.Fatalf("alone again: %v, want [4 5 6 4]", got)
	}
}

// Claims of launchers that are gone, or whose pid now names another
// process, and lines that do not parse, count for nothing and are dropped.
func TestClaimsIgnoreDeadLaunchers(t *testing.T) {
	path := useClaimsFile(t)
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	start, ok := procStart(os.Getpid())
	if !ok {
		t.Fatal("no start time for this process")
	}
	lines := []string{
		fmt.Sprintf("%d 1 deadjob 0", dead.Process.Pid),     // exited
		fmt.Sprintf("%d %d reused 0", os.Getpid(), start+1), // another process's start time
		"garbage", "1 2 three", "-4 1 x 0", "", "12 x y 0",
		fmt.Sprintf("%d %d live 1", os.Getpid(), start), // this process: alive
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := newClaimer().claim([]int{0, 1}, 2); !slices.Equal(got, []int{0, 0}) {
		t.Fatalf("claims %v, want [0 0] (only the live claim on CPU 1 counts)", got)
	}
	b, _ := os.ReadFile(path)
	for _, gone := range []string{"deadjob", "reused", "garbage", "three"} {
		if strings.Contains(string(b), gone) {
			t.Errorf("claims file keeps %q:\n%s", gone, b)
		}
	}
	if !strings.Contains(string(b), " live 1\n") {
		t.Errorf("claims file lost the live claim:\n%s", b)
	}
}

// Without a usable claims file, workers are bound round robin.
func TestClaimsFileUnusable(t *testing.T) {
	saved := claimsPath
	defer func() { claimsPath = saved }()
	claimsPath = func() string { return filepath.Join(t.TempDir(), "missing", "claims") }
	if got := newClaimer().claim([]int{3, 7}, 3); !slices.Equal(got, []int{3, 7, 3}) {
		t.Fatalf("claims %v, want [3 7 3]", got)
	}
}

// Jobs claiming at once (the file lock) each get a CPU of their own.
func TestClaimsConcurrent(t *testing.T) {
	useClaimsFile(t)
	cpus := []int{0, 1, 2, 3, 4, 5, 6, 7}
	got := make([]int, len(cpus))
	var wg sync.WaitGroup
	for i := range cpus {
		wg.Go(func() { got[i] = newClaimer().claim(cpus, 1)[0] })
	}
	wg.Wait()
	slices.Sort(got)
	if !slices.Equal(got, cpus) {
		t.Fatalf("CPUs %v, want each of %v once", got, cpus)
	}
}
