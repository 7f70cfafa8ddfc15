// Package bindingtest builds the stand-in libraries the bindings' tests load
// in place of a vendor library (fake_cgo_test.go files): C source compiled
// with the host C compiler into a shared object. Test support only: no
// production package imports it (internal/layering).
package bindingtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/binding"
)

// CC is the host C compiler: $CC, gcc, cc or clang, the first on $PATH; ""
// when there is none.
func CC() string {
	for _, c := range []string{os.Getenv("CC"), "gcc", "cc", "clang"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	return ""
}

// Build compiles source into dir/name (a shared object, with flags such as
// -DX or -O1 first) and returns its path. Without a host C compiler it skips
// the test, saying that what builds the stand-in (what) cannot be built.
func Build(t testing.TB, dir, name, what, source string, flags ...string) string {
	t.Helper()
	cc := CC()
	if cc == "" {
		t.Skip("no host C compiler to build the stand-in " + what)
	}
	src := filepath.Join(dir, name+".c")
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	lib := filepath.Join(dir, name)
	args := append(append([]string{}, flags...), "-shared", "-fPIC", "-o", lib, src)
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("building the stand-in %s: %v\n%s", what, err, out)
	}
	return lib
}

// CheckSymbols fails t for a malformed symbol list: an entry without a name
// or candidates, a name listed twice, a candidate that does not start with
// prefix(api) (the name itself for a versioned variant, or the vendor's
// prefix), or one that ends in a banned suffix (per-thread-stream variants).
func CheckSymbols(t testing.TB, syms []binding.Symbol, prefix func(api string) string, banned ...string) {
	t.Helper()
	seen := map[string]bool{}
	for i, s := range syms {
		if s.API == "" || len(s.Candidates) == 0 {
			t.Fatalf("symbol %d has no name or candidates: %+v", i, s)
		}
		if seen[s.API] {
			t.Fatalf("duplicate api %s", s.API)
		}
		seen[s.API] = true
		for _, c := range s.Candidates {
			if p := prefix(s.API); !strings.HasPrefix(c, p) {
				t.Errorf("%s: candidate %s does not start with %s", s.API, c, p)
			}
			for _, b := range banned {
				if strings.HasSuffix(c, b) {
					t.Errorf("%s: candidate %s is a %s variant", s.API, c, b)
				}
			}
		}
	}
}

// CheckPlainSymbols fails t unless every entry of syms is exported under its
// documented name alone (one candidate, the API name) and that name starts
// with prefix: the lists of libraries that version no entry point (NCCL and
// RCCL, NVRTC, hiprtc), whose constants are then the exported names.
func CheckPlainSymbols(t testing.TB, syms []binding.Symbol, prefix string) {
	t.Helper()
	CheckSymbols(t, syms, func(string) string { return prefix })
	for i, s := range syms {
		if len(s.Candidates) != 1 || s.Candidates[0] != s.API {
			t.Errorf("symbol %d (%s): candidates %v, want the name alone", i, s.API, s.Candidates)
		}
	}
}

// RunChild runs test (a TestXChild of the calling test binary) in a child
// process with env added to this one's, and fails t unless it passed: the
// stand-in library tests load a fake library, which a process can do once.
func RunChild(t testing.TB, test string, env ...string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+test+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+test) {
		t.Fatalf("child %s: %v\n%s", test, err, out)
	}
}

// WantCalls fails t unless the call log a stand-in library wrote at path
// (one call a line) is want, in order.
func WantCalls(t testing.TB, path string, want []string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != strings.Join(want, "\n") {
		t.Fatalf("calls:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}
