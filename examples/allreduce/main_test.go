package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlock is the README's first ```go block.
func readmeBlock(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no ```go block")
	}
	return string(m[1])
}

// The README's Go snippet is this program, byte for byte: it compiles as
// written (this package builds) and prints what the README promises.
func TestREADMESnippetIsThisProgram(t *testing.T) {
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if got := readmeBlock(t); got != string(src) {
		t.Fatalf("README.md's Go block differs from examples/allreduce/main.go; keep them identical.\nREADME:\n%s", got)
	}
}

func TestOutput(t *testing.T) {
	r, w, _ := os.Pipe()
	stdout := os.Stdout
	os.Stdout = w
	main()
	w.Close()
	os.Stdout = stdout
	var b bytes.Buffer
	b.ReadFrom(r)
	want := "rank 0 [2e+08 6]\nrank 1 [2e+08 6]\nrank 2 [2e+08 6]\nrank 3 [2e+08 6]\n"
	if b.String() != want {
		t.Fatalf("output %q, want %q", b.String(), want)
	}
}

// The README's instructions for depending on detcoll from another module
// work: a fresh module with a replace directive to this checkout builds the
// snippet (offline: the module cache must hold detcoll's dependencies).
func TestDependFromAnotherModule(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skipping the build of a separate module")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(readmeBlock(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Offline: no proxy, no checksum database; detcoll's go.sum holds the
	// sums of its dependencies (a user's go get would fetch them).
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off", "GOSUMDB=off")
	for _, args := range [][]string{
		{"mod", "init", "example.com/user"},
		{"mod", "edit", "-replace", "github.com/detcoll/detcoll=" + root},
		{"get", "github.com/detcoll/detcoll"},
		{"build", "-o", filepath.Join(dir, "user"), "."},
	} {
		cmd := exec.Command("go", args...)
		cmd.Dir, cmd.Env = dir, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	out, err := exec.Command(filepath.Join(dir, "user")).Output()
	if err != nil || !strings.HasPrefix(string(out), "rank 0 [2e+08 6]") {
		t.Fatalf("the user's program: %v\n%s", err, out)
	}
}
