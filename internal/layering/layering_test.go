package layering

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/detcoll/detcoll"

// The floors, bottom first: docs/architecture.md's map. A package may
// import packages of its own floor or of floors below; a new package must
// be placed here (the test fails until it is).
var floors = []struct {
	name string
	pkgs []string
}{
	{"foundations", []string{"dtype", "tree", "store", "transport", "gpu/kernels", "internal/dl", "internal/kparams",
		"internal/kcache", "internal/probefmt", "internal/procstat", "internal/agree", "internal/binding", "internal/binding/gpurt", "internal/binding/rtc", "internal/binding/bindingtest", "internal/bindgen", "internal/buildcheck", "internal/layering", "internal/cudaemu", "internal/ccl/ccltest"}},
	{"host mechanics", []string{"reduce", "transport/inproc", "transport/tcp", "transport/shm", "launch", "internal/ring",
		"transport/transporttest", "store/storetest"}},
	{"host communicator", []string{"", "cluster", "parallel", "bench", "transport/tcp/internal/leanbench"}},
	{"device runtime interface", []string{"internal/ccl", "gpu/devrt", "gpu/devrt/rtshared"}},
	{"vendor bindings", []string{"internal/cuda", "internal/hip", "internal/nvrtc", "internal/hiprtc", "internal/nccl",
		"internal/rccl", "internal/cublas"}},
	{"vendor runtimes", []string{"gpu/devrt/cudart", "gpu/devrt/hiprt", "gpu/rocm", "internal/gputest"}},
	{"device library", []string{"gpu", "gpu/devcomm", "gpu/gpuattn", "gpu/gpuffn"}},
	{"device tools", []string{"gpu/devverify", "gpu/devbench"}},
	{"application", []string{"cmd/detcoll/internal/app", "capi", "cmd/detcoll", "examples/allreduce", "launch/e2e", "launch/internal/testworker", "internal/torchref", "internal/pytorchtest", "docs/benchmarks/peers/collect", "docs/benchmarks/loops"}},
}

// testSupport may be imported by tests only; allowed lists the exceptions.
var (
	testSupport = []string{"internal/binding/bindingtest", "internal/gputest", "internal/cudaemu", "internal/ccl/ccltest", "transport/transporttest", "store/storetest"}
	allowed     = map[[2]string]bool{{"gpu/devverify", "internal/gputest"}: true}
)

type pkg struct {
	ImportPath string
	Imports    []string
	Module     *struct{ Path string }
}

func goTool(t *testing.T) string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Skip("no go tool to list the packages")
	}
	return p
}

// modulePackages lists the module's packages and their imports with
// `go list -deps -json ./...` (cgo on: the build with the most imports).
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command(goTool(t), "list", "-deps", "-json", module+"/...")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	rel := func(p string) string { return strings.TrimPrefix(strings.TrimPrefix(p, module), "/") }
	res := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if p.ImportPath != module && !strings.HasPrefix(p.ImportPath, module+"/") {
			continue
		}
		var imps []string
		for _, imp := range p.Imports {
			if imp == module || strings.HasPrefix(imp, module+"/") {
				imps = append(imps, rel(imp))
			}
		}
		res[rel(p.ImportPath)] = imps
	}
	return res
}

func floorOf() map[string]int {
	m := map[string]int{}
	for i, f := range floors {
		for _, p := range f.pkgs {
			m[p] = i
		}
	}
	return m
}

func name(p string) string {
	if p == "" {
		return "detcoll (root)"
	}
	return p
}

// violations lists the broken rules of the import graph pkgs.
func violations(pkgs map[string][]string) []string {
	floor := floorOf()
	support := map[string]bool{}
	for _, s := range testSupport {
		support[s] = true
	}
	var paths, bad []string
	for p := range pkgs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		fp, ok := floor[p]
		if !ok {
			bad = append(bad, name(p)+" is on no floor: place it in internal/layering and docs/architecture.md")
			continue
		}
		for _, imp := range pkgs[p] {
			if fi, ok := floor[imp]; ok && fi > fp {
				bad = append(bad, fmt.Sprintf("%s (%s) imports %s (%s): an import runs up the floors", name(p), floors[fp].name, name(imp), floors[fi].name))
			}
			if support[imp] && !support[p] && !allowed[[2]string{p, imp}] {
				bad = append(bad, fmt.Sprintf("%s imports the test-support package %s", name(p), imp))
			}
		}
	}
	return bad
}

// TestNoImportRunsUp: every package is on a floor and imports nothing
// above it; production code imports no test support.
func TestNoImportRunsUp(t *testing.T) {
	pkgs := modulePackages(t)
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d module packages", len(pkgs))
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// TestFloorsAreListedOnce: the table itself is consistent.
func TestFloorsAreListedOnce(t *testing.T) {
	seen := map[string]string{}
	for _, f := range floors {
		for _, p := range f.pkgs {
			if prev, dup := seen[p]; dup {
				t.Errorf("%s is on floors %q and %q", name(p), prev, f.name)
			}
			seen[p] = f.name
		}
	}
}

// TestCheckCatchesViolations: the rules applied to made-up graphs: an
// upward import, an unplaced package and test support in production code
// are each reported; a downward graph is clean.
func TestCheckCatchesViolations(t *testing.T) {
	if v := violations(map[string][]string{"gpu/devcomm": {"gpu", "", "internal/ccl"}, "gpu": {"dtype"}}); len(v) != 0 {
		t.Fatalf("a downward graph: %v", v)
	}
	for _, g := range []map[string][]string{
		{"cluster": {"gpu/devcomm"}},
		{"internal/cuda": {"gpu/devrt/cudart"}},
		{"gpu/newthing": {"gpu"}},
		{"gpu/devcomm": {"internal/cudaemu"}},
	} {
		if v := violations(g); len(v) != 1 {
			t.Errorf("%v: %d violations %v, want 1", g, len(v), v)
		}
	}
}

// TestDocMapMatches: the map at the top of docs/architecture.md puts every
// package on the floor this test does, and lists every package.
func TestDocMapMatches(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "## Map of the module")
	if start < 0 {
		t.Fatal("docs/architecture.md has no \"## Map of the module\"")
	}
	rest := doc[start+1:]
	if end := strings.Index(rest, "\n## "); end >= 0 {
		rest = rest[:end]
	}
	floor := floorOf()
	listed := map[string]bool{}
	cur := -1
	for _, line := range strings.Split(rest, "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 4 || strings.HasPrefix(strings.TrimSpace(cols[1]), "---") || strings.TrimSpace(cols[1]) == "floor" {
			continue
		}
		if f := strings.TrimSpace(cols[1]); f != "" {
			var n int
			if _, err := fmt.Sscanf(f, "%d", &n); err != nil {
				t.Fatalf("floor cell %q", f)
			}
			cur = n
		}
		for _, part := range strings.Split(cols[2], "`")[1:] {
			if strings.HasPrefix(part, ",") || strings.TrimSpace(part) == "" || strings.HasPrefix(part, " (") {
				continue
			}
			p := part
			if p == "detcoll" {
				p = ""
			}
			listed[p] = true
			if f, ok := floor[p]; !ok {
				t.Errorf("the doc's map lists %s, which is on no floor here", name(p))
			} else if f != cur {
				t.Errorf("the doc's map puts %s on floor %d, the test on %d (%s)", name(p), cur, f, floors[f].name)
			}
		}
	}
	for p := range floor {
		if !listed[p] {
			t.Errorf("the doc's map does not list %s", name(p))
		}
	}
	if len(listed) < 40 {
		t.Errorf("read only %d packages from the doc's map", len(listed))
	}
}
