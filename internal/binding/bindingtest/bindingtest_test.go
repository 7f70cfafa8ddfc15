package bindingtest

import (
	"os"
	"strings"
	"testing"
)

func TestBuild(t *testing.T) {
	if CC() == "" {
		t.Skip("no host C compiler here")
	}
	dir := t.TempDir()
	lib := Build(t, dir, "libx.so", "test library", "int x(void) { return X; }\n", "-DX=7")
	if fi, err := os.Stat(lib); err != nil || fi.Size() == 0 || !strings.HasSuffix(lib, "/libx.so") {
		t.Fatalf("Build = %s (%v)", lib, err)
	}
}

func TestCCFromEnv(t *testing.T) {
	t.Setenv("CC", "/nonexistent/cc")
	t.Setenv("PATH", "")
	if got := CC(); got != "" {
		t.Errorf("CC() = %q with no compiler reachable", got)
	}
}
