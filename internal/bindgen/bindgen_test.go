package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// packages are the bindings generated from a symbols.txt.
var packages = []string{"cuda", "hip", "nvrtc", "hiprtc", "cublas", "ccl"}

// TestGeneratedUpToDate regenerates every binding's symbols_gen.go and
// byte-compares it with the checked-in file: a symbols.txt edited without
// go generate (or a hand edit of the output) fails here.
func TestGeneratedUpToDate(t *testing.T) {
	for _, p := range packages {
		dir := filepath.Join("..", p)
		src, err := os.ReadFile(filepath.Join(dir, specFile))
		if err != nil {
			t.Fatal(err)
		}
		spec, err := Parse(specFile, src)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if spec.Package != p {
			t.Errorf("%s/%s declares package %s", p, specFile, spec.Package)
		}
		want, err := Generate(spec)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		got, err := os.ReadFile(filepath.Join(dir, outFile))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("internal/%s/%s is stale: run go generate ./internal/%s", p, outFile, p)
		}
		if !bytes.HasPrefix(got, []byte("// Code generated ")) || !bytes.Contains(got, []byte("DO NOT EDIT.")) {
			t.Errorf("internal/%s/%s lacks the generated-code header", p, outFile)
		}
	}
}

func TestGenerate(t *testing.T) {
	spec, err := Parse("t.txt", []byte(`
package x # trailing comment
library the test library
fn xInit
fn xAlloc optional xAlloc_v2 xAlloc
result Status names X_%d
code 0 X_OK
code -2 X_GONE
message 0 all well
`))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Generate(spec)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"package x\n",
		"xInit sym = iota\n",
		"\txAlloc\n\tnumSyms\n",
		`xInit:  {API: "xInit", Candidates: []string{"xInit"}},`,
		`xAlloc: {API: "xAlloc", Candidates: []string{"xAlloc_v2", "xAlloc"}, Optional: true},`,
		"var names = map[Status]string{\n\t0:  \"X_OK\",\n\t-2: \"X_GONE\",\n}",
		"var resultMessages = map[Status]string{\n\t0: \"all well\",\n}",
		`const resultFallback = "X_%d"`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	again, _ := Generate(spec)
	if !bytes.Equal(out, again) {
		t.Error("Generate is not deterministic")
	}
}

func TestGeneratePerLoad(t *testing.T) {
	spec, err := Parse("t.txt", []byte("package x\ntable per-load\nfn xInit\n"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Generate(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "func newSyms() *binding.Table[sym] {") || strings.Contains(string(out), "var syms") {
		t.Errorf("per-load output:\n%s", out)
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{"fn xInit\n", "no package line"},
		{"package x\n", "no fn lines"},
		{"package x\nfn xInit\nfn xInit\n", "t.txt:3: xInit already declared on line 2"},
		{"package x\nfn XInit\n", "t.txt:2: fn wants an unexported identifier"},
		{"package x\nfn xInit x-bad\n", `t.txt:2: candidate "x-bad" is not a C identifier`},
		{"package x\nfunc xInit\n", `t.txt:2: unknown directive "func"`},
		{"package x\nfn xInit\nresult R names X_%s\n", "wants exactly one %d"},
		{"package x\nfn xInit\nresult R names X_%d\ncode 1 A\ncode 1 B\n", "t.txt:5: code 1 already named on line 4"},
		{"package x\nfn xInit\nresult R names X_%d\ncode one A\n", "t.txt:4: code:"},
		{"package x\nfn xInit\ncode 1 A\n", "without a result line"},
		{"package 1x\n", "t.txt:1: package wants one identifier"},
		{"package x\nfn xInit\ntable global\n", "t.txt:3: table wants per-load"},
		{"package x\nfn xInit role=Nothing\n", `t.txt:2: unknown role "Nothing"`},
		{"package x\nfn xA role=StreamQuery\nfn xB role=StreamQuery\n", "t.txt:3: role StreamQuery already played by line 2"},
		{"package x\nfn xA role=StreamQuery\n", "no fn plays role StreamCreate"},
	} {
		_, err := Parse("t.txt", []byte(c.src))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", c.src, err, c.want)
		}
	}
}

func TestRunCheck(t *testing.T) {
	dir := t.TempDir()
	wd, _ := os.Getwd()
	t.Cleanup(func() { os.Chdir(wd) })
	if err := os.Chdir(dir); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(specFile, []byte("package x\nfn xInit\n"), 0o644)
	if err := run(true); err == nil {
		t.Fatal("check passed without an output file")
	}
	if err := run(false); err != nil {
		t.Fatal(err)
	}
	if err := run(true); err != nil {
		t.Fatalf("check after generate: %v", err)
	}
	os.WriteFile(outFile, []byte("// stale\n"), 0o644)
	if err := run(true); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("check of a stale file = %v", err)
	}
}
