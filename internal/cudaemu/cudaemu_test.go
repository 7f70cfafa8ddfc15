package cudaemu

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestRequireHostCC: with no host compiler (an empty PATH and no $CXX),
// Build skips the test, or fails it when DETCOLL_REQUIRE_HOSTCC=1. Run in
// a child process, so that the failing child is the evidence.
func TestRequireHostCC(t *testing.T) {
	if os.Getenv("DETCOLL_CUDAEMU_CHILD") == "1" {
		Build(t, "never-built", "int main() { return 0; }")
		t.Log("BUILT")
		return
	}
	run := func(require string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestRequireHostCC$", "-test.v")
		cmd.Env = []string{"DETCOLL_CUDAEMU_CHILD=1", "PATH=", "CXX=", RequireEnv + "=" + require}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("")
	if err != nil || !strings.Contains(out, "SKIP") || !strings.Contains(out, ErrNoCompiler.Error()) {
		t.Fatalf("without %s: err %v, output:\n%s", RequireEnv, err, out)
	}
	out, err = run("1")
	if err == nil || !strings.Contains(out, "FAIL") || strings.Contains(out, "SKIP") {
		t.Fatalf("with %s=1: err %v, output:\n%s", RequireEnv, err, out)
	}
}

// TestCompileRuns: with a host compiler, a program builds once and runs.
func TestCompileRuns(t *testing.T) {
	bin := Build(t, "hello", Shim+"int main() { printf(\"%d\", (int)__fadd_rn(1.0f, 2.0f)); return 0; }")
	out, err := exec.Command(bin).Output()
	if err != nil || string(out) != "3" {
		t.Fatalf("output %q, %v", out, err)
	}
}
