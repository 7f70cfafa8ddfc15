package bindingtest

import (
	"os"
	"strings"
	"testing"

	"github.com/detcoll/detcoll/internal/binding"
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

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()                   {}
func (r *recorder) Errorf(f string, a ...any) { r.errs = append(r.errs, f) }
func (r *recorder) Fatalf(f string, a ...any) { r.errs = append(r.errs, f); panic(r) }

func check(syms []binding.Symbol) []string {
	return recordFailures(func(r testing.TB) { CheckSymbols(r, syms, func(api string) string { return api }, "_ptsz") })
}

func recordFailures(f func(testing.TB)) (errs []string) {
	r := &recorder{}
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
		errs = r.errs
	}()
	f(r)
	return r.errs
}

func TestCheckSymbols(t *testing.T) {
	good := []binding.Symbol{{API: "xA", Candidates: []string{"xA_v2", "xA"}}, {API: "xB", Candidates: []string{"xB"}}}
	if errs := check(good); len(errs) != 0 {
		t.Errorf("a good list fails: %v", errs)
	}
	for _, bad := range [][]binding.Symbol{
		{{API: "", Candidates: []string{"x"}}},
		{{API: "xA"}},
		{{API: "xA", Candidates: []string{"xA"}}, {API: "xA", Candidates: []string{"xA"}}},
		{{API: "xA", Candidates: []string{"yA"}}},
		{{API: "xA", Candidates: []string{"xA_ptsz"}}},
	} {
		if errs := check(bad); len(errs) == 0 {
			t.Errorf("%+v passes", bad)
		}
	}
}

func TestCheckPlainSymbols(t *testing.T) {
	check := func(syms []binding.Symbol) []string {
		return recordFailures(func(r testing.TB) { CheckPlainSymbols(r, syms, "x") })
	}
	if errs := check([]binding.Symbol{{API: "xA", Candidates: []string{"xA"}}}); len(errs) != 0 {
		t.Errorf("a plain list fails: %v", errs)
	}
	for _, bad := range [][]binding.Symbol{
		{{API: "xA", Candidates: []string{"xA_v2", "xA"}}}, // versioned
		{{API: "xA", Candidates: []string{"xB"}}},          // another name
		{{API: "yA", Candidates: []string{"yA"}}},          // not the prefix
	} {
		if errs := check(bad); len(errs) == 0 {
			t.Errorf("%+v passes", bad)
		}
	}
}
