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
code 0 X_OK StatusOK
code 1 X_ODD
code -2 X_GONE statusGone
message 0 all well
vendor xlib
errors LogError StatusName
compiler xInit xAlloc
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
		"const xInit, xAlloc, numSyms sym = 0, 1, 2\n",
		`var syms = binding.NewTable[sym]([]binding.Symbol{xInit: {API: "xInit", Candidates: []string{"xInit"}}, ` +
			`xAlloc: {API: "xAlloc", Candidates: []string{"xAlloc_v2", "xAlloc"}, Optional: true}})`,
		`var names = map[Status]string{0: "X_OK", 1: "X_ODD", -2: "X_GONE"}`,
		`var resultMessages = map[Status]string{0: "all well"}`,
		"const StatusOK, statusGone Status = 0, -2\n",
		"func (vendor) Name() string       { return \"xlib\" }\n",
		"func StatusName(r Status) string { return binding.Name(names, resultFallback, r) }\n",
		"type Error = binding.LogError[Status, vendor]\n",
		"var lib = &rtc.Library[sym, vendor]{Table: syms, Load: load, Names: StatusName, VersionSym: xInit, ErrorString: xAlloc}\n",
		"\"github.com/detcoll/detcoll/internal/binding/rtc\"\n",
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
		{"package x\nfn xInit\nvendor x-y\n", "t.txt:3: vendor wants one identifier"},
		{"package x\nfn xInit\nerrors Failure F\n", "t.txt:3: errors wants Error or LogError"},
		{"package x\nfn xInit\nresult R names X_%d\nerrors Error F\n", "an errors line needs a result line and a vendor line"},
		{"package x\nfn xInit\ncompiler xInit xInit\n", "a compiler line needs an errors line"},
		{"package x\nvendor x\nfn xInit\nresult R n X_%d\nerrors Error F\ncompiler xInit xNone\n", "compiler entry point xNone is not an fn"},
		{"package x\nfn xInit\nresult R names X_%d\ncode 1 A b-c\n", "t.txt:4: code wants a number, one name and optionally a Go constant"},
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
