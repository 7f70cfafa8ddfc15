package buildcheck

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/detcoll/detcoll/"

// The packages that make a build CUDA or ROCm: none of the other kind may
// be in the dependency graph of a single-vendor build.
var (
	// neutralPackages (TestNeutral) run on whichever gpu/devrt runtime the
	// binary links.
	cudaPackages = []string{"internal/cuda", "internal/nvrtc", "internal/nccl", "internal/cublas",
		"gpu/devrt/cudart", "gpu/gpuffn"}
	rocmPackages = []string{"internal/hip", "internal/hiprtc", "internal/rccl", "gpu/devrt/hiprt", "gpu/rocm"}
	// Pure-Go code both vendors' bindings share (docs/architecture.md):
	// in every build that has a GPU kind, and free of either vendor.
	sharedPackages = []string{"internal/kparams", "internal/kcache", "internal/probefmt"}
	// Strings only the vendor bindings contain: library names and entry points.
	cudaStrings = []string{"libcuda.so", "libnvrtc.so", "libnccl.so", "libcublas", "cuLaunchKernel", "nvrtcCompileProgram"}
	rocmStrings = []string{"libamdhip64.so", "libhiprtc.so", "librccl.so", "libamd_comgr.so", "hipModuleLaunchKernel", "hiprtcCompileProgram"}
	// Present in a build that has the vendor (positive controls: a check
	// that cannot find these could not find a leak either).
	cudaWitness = []string{"libcuda.so", "libnvrtc.so", "libnccl.so", "cuLaunchKernel"}
	rocmWitness = []string{"libamdhip64.so", "librccl.so", "hipModuleLaunchKernel", "hiprtcCompileProgram"}
)

// The vendor-neutral GPU packages: in every build, importing no vendor
// (gpu/devrt/rtshared and internal/binding/...: the shared halves of the
// vendor implementations and of the dlopened bindings).
var neutralPackages = []string{"gpu", "gpu/devrt", "gpu/devcomm", "gpu/devbench", "gpu/gpuattn", "gpu/devrt/rtshared",
	"internal/binding", "internal/binding/gpurt", "internal/binding/rtc"}

type config struct {
	name       string
	tags       string
	cgo        bool
	cuda, rocm bool // what the build must carry
}

var configs = []config{
	{name: "default", cgo: true, cuda: true, rocm: true},
	{name: "cuda", tags: "cuda", cgo: true, cuda: true},
	{name: "rocm", tags: "rocm", cgo: true, rocm: true},
	{name: "cuda+rocm", tags: "cuda,rocm", cgo: true, cuda: true, rocm: true},
	{name: "cgo-off"},
}

func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no go command to build with: %v", err)
	}
	return p
}

// command runs the go tool in the module root with c's environment.
func command(t *testing.T, c config, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(goTool(t), args...)
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if c.cgo {
		cmd.Env[len(cmd.Env)-1] = "CGO_ENABLED=1"
	}
	return cmd
}

func requireCgo(t *testing.T, c config) {
	t.Helper()
	if !c.cgo {
		return
	}
	out, err := command(t, c, "env", "CC").Output()
	if err != nil {
		t.Fatal(err)
	}
	if cc := strings.Fields(string(out)); len(cc) == 0 {
		t.Skip("no C compiler for cgo builds")
	} else if _, err := exec.LookPath(cc[0]); err != nil {
		t.Skipf("no C compiler for cgo builds (%s): %v", cc[0], err)
	}
}

func tagArgs(c config) []string {
	if c.tags == "" {
		return nil
	}
	return []string{"-tags", c.tags}
}

// TestDeps checks the dependency graphs of the binaries (`go list -deps`).
func TestDeps(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			requireCgo(t, c)
			args := append(append([]string{"list", "-deps"}, tagArgs(c)...), "./cmd/detcoll", "./capi")
			out, err := command(t, c, args...).CombinedOutput()
			if err != nil {
				t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			}
			deps := map[string]bool{}
			for _, p := range strings.Fields(string(out)) {
				deps[strings.TrimPrefix(p, module)] = true
			}
			check := func(kind string, pkgs []string, want bool) {
				for _, p := range pkgs {
					if deps[p] && !want {
						t.Errorf("%s build depends on %s package %s", c.name, kind, p)
					}
				}
				// The binding of each vendor is the witness that the kind is in.
				if want && !deps[pkgs[0]] {
					t.Errorf("%s build lacks %s (%s)", c.name, pkgs[0], kind)
				}
			}
			check("CUDA", cudaPackages, c.cuda)
			check("ROCm", rocmPackages, c.rocm)
			for _, p := range sharedPackages {
				if (c.cuda || c.rocm) && !deps[p] {
					t.Errorf("%s build lacks the shared package %s", c.name, p)
				}
			}
			if !c.cgo && deps["internal/ccl"] {
				t.Error("a build without cgo carries the NCCL/RCCL binding")
			}
		})
	}
}

// TestNeutral checks that the vendor-neutral GPU packages (not their
// tests, which link both runtimes) depend on no package of either vendor,
// in the default cgo build.
func TestNeutral(t *testing.T) {
	c := configs[0]
	requireCgo(t, c)
	args := []string{"list", "-deps"}
	for _, p := range neutralPackages {
		args = append(args, "./"+p)
	}
	out, err := command(t, c, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	deps := map[string]bool{}
	for _, p := range strings.Fields(string(out)) {
		deps[strings.TrimPrefix(p, module)] = true
	}
	for _, p := range neutralPackages {
		if !deps[p] {
			t.Errorf("go list -deps did not list %s itself", p)
		}
	}
	for _, p := range append(append([]string{}, cudaPackages...), rocmPackages...) {
		if deps[p] {
			t.Errorf("a vendor-neutral GPU package (%v) depends on the vendor package %s", neutralPackages, p)
		}
	}
}

// TestShared checks that the packages both vendors' bindings share depend
// on no package of either vendor, so that sharing them cannot carry one
// vendor into the other's build.
func TestShared(t *testing.T) {
	c := config{name: "default", cgo: true}
	requireCgo(t, c)
	for _, p := range sharedPackages {
		out, err := command(t, c, "list", "-deps", "./"+p).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v\n%s", p, err, out)
		}
		deps := map[string]bool{}
		for _, d := range strings.Fields(string(out)) {
			deps[strings.TrimPrefix(d, module)] = true
		}
		for _, v := range append(append([]string{"internal/ccl", "internal/dl", "gpu/devrt"}, cudaPackages...), rocmPackages...) {
			if deps[v] {
				t.Errorf("shared package %s depends on %s", p, v)
			}
		}
	}
}

var (
	buildOnce sync.Once
	binDir    string
	built     []build
)

type build struct {
	path string
	bin  []byte
	err  error
	out  []byte
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds cmd/detcoll once per configuration, in parallel.
func binaries(t *testing.T) []build {
	t.Helper()
	for _, c := range configs {
		requireCgo(t, c)
	}
	buildOnce.Do(func() {
		built = make([]build, len(configs))
		var err error
		if binDir, err = os.MkdirTemp("", "detcoll-buildcheck-"); err != nil {
			for i := range built {
				built[i].err = err
			}
			return
		}
		var wg sync.WaitGroup
		for i, c := range configs {
			path := filepath.Join(binDir, c.name)
			args := append(append([]string{"build"}, tagArgs(c)...), "-o", path, "./cmd/detcoll")
			cmd := command(t, c, args...)
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := build{path: path}
				b.out, b.err = cmd.CombinedOutput()
				if b.err == nil {
					b.bin, b.err = os.ReadFile(path)
				}
				built[i] = b
			}()
		}
		wg.Wait()
	})
	return built
}

// TestBinaries searches each configuration's cmd/detcoll for the other
// vendor's library names and entry points, and its own (positive control).
func TestBinaries(t *testing.T) {
	res := binaries(t)
	for i, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			r := res[i]
			if r.err != nil {
				t.Fatalf("build: %v\n%s", r.err, r.out)
			}
			has := func(s string) bool { return bytes.Contains(r.bin, []byte(s)) }
			for _, s := range cudaStrings {
				if !c.cuda && has(s) {
					t.Errorf("%s binary contains the CUDA string %q", c.name, s)
				}
			}
			for _, s := range rocmStrings {
				if !c.rocm && has(s) {
					t.Errorf("%s binary contains the ROCm string %q", c.name, s)
				}
			}
			for _, s := range cudaWitness {
				if c.cuda && !has(s) {
					t.Errorf("%s binary lacks %q: CUDA is not in it", c.name, s)
				}
			}
			for _, s := range rocmWitness {
				if c.rocm && !has(s) {
					t.Errorf("%s binary lacks %q: ROCm is not in it", c.name, s)
				}
			}
		})
	}
}

// TestEnvReportsKinds runs `detcoll env` of each build: it names the GPU
// kinds built in, and only their sections.
func TestEnvReportsKinds(t *testing.T) {
	res := binaries(t)
	for i, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			if res[i].err != nil {
				t.Fatalf("build: %v\n%s", res[i].err, res[i].out)
			}
			out, err := exec.Command(res[i].path, "env").CombinedOutput()
			if err != nil {
				t.Fatalf("detcoll env: %v\n%s", err, out)
			}
			s := string(out)
			want := map[string]string{"default": "GPU kinds in this build: cuda, rocm\n", "cuda": "GPU kinds in this build: cuda\n",
				"rocm": "GPU kinds in this build: rocm\n", "cuda+rocm": "GPU kinds in this build: cuda, rocm\n",
				"cgo-off": "GPU kinds in this build: none (built without cgo"}[c.name]
			if !strings.Contains(s, want) {
				t.Fatalf("detcoll env of the %s build lacks %q:\n%s", c.name, want, s)
			}
			if strings.Contains(s, "HIP runtime") != c.rocm || strings.Contains(s, "CUDA driver") != c.cuda {
				t.Fatalf("%s build's env report has the wrong sections:\n%s", c.name, s)
			}
		})
	}
}
