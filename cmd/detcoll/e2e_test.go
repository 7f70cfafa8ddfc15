package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/bench"
)

// Binaries built once by TestMain: detcollBin unstamped (as `go build`
// makes it here, -buildvcs=false), stampedBin with the Makefile's -ldflags.
var detcollBin, stampedBin, buildErr string

// The stamp of stampedBin.
const (
	stampCommit  = "0123456789abcdef0123456789abcdef01234567"
	stampVersion = "v9.9.9-test"
)

func TestMain(m *testing.M) {
	flag.Parse()
	var dir string
	if !testing.Short() {
		var err error
		dir, err = os.MkdirTemp("", "detcoll-cli-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		detcollBin, stampedBin = filepath.Join(dir, "detcoll"), filepath.Join(dir, "detcoll-stamped")
		ld := "-X main.commit=" + stampCommit + " -X main.dirty=true -X main.version=" + stampVersion
		for _, args := range [][]string{{"build", "-o", detcollBin, "."}, {"build", "-ldflags", ld, "-o", stampedBin, "."}} {
			if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
				buildErr = fmt.Sprintf("go %v: %v\n%s", args, err, out)
				break
			}
		}
	}
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}

// buildDetcoll returns the binary TestMain built.
func buildDetcoll(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: skipping the end-to-end tests of the binary")
	}
	if buildErr != "" {
		t.Fatal(buildErr)
	}
	return detcollBin
}

// The main job end to end: bench under the launcher and bench spawning its
// own ranks both print the table and write a valid detcoll.bench.v1 report.
func TestBenchEndToEnd(t *testing.T) {
	bin := buildDetcoll(t)
	dir := t.TempDir()
	args := []string{"--device", "cpu", "--size-bytes", "4096", "65536", "--warmup", "0", "--iterations", "1", "--samples", "2"}
	for name, argv := range map[string][]string{
		"under launch": append([]string{"launch", "--standalone", "--nproc-per-node", "3", "--", bin, "bench", "--output", filepath.Join(dir, "launch.json")}, args...),
		"self-spawned": append([]string{"bench", "--nproc-per-node", "2", "--output", filepath.Join(dir, "self.json"), "--plot", filepath.Join(dir, "self.svg")}, args...),
	} {
		cmd := exec.Command(bin, argv...)
		cmd.Env = append(os.Environ(), "DETCOLL_RANK=", "RANK=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
		if !strings.Contains(string(out), "all_reduce") || !strings.Contains(string(out), "repeat bitwise: ✓") {
			t.Fatalf("%s: no table:\n%s", name, out)
		}
	}
	for _, f := range []string{"launch.json", "self.json"} {
		rep, err := bench.ReadJSON(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if rep.Schema != "detcoll.bench.v1" || len(rep.Rows) != 10 || !rep.AllRankRepeatBitwise {
			t.Fatalf("%s: schema %q, %d rows, repeat %v", f, rep.Schema, len(rep.Rows), rep.AllRankRepeatBitwise)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "self.svg")); err != nil || st.Size() == 0 {
		t.Fatalf("plot: %v", err)
	}
}

func TestVerifyCommandEndToEnd(t *testing.T) {
	bin := buildDetcoll(t)
	out, err := exec.Command(bin, "verify", "--world-sizes", "2,3", "--counts", "1,9").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "checks, 0 failed") {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	out, err = exec.Command(bin, "verify", "--transports", "smoke-signals").CombinedOutput()
	if err == nil {
		t.Fatalf("verify accepted an unknown transport:\n%s", out)
	}
}
