// Package cudaemu compiles CUDA C kernel sources with the host C++ compiler,
// so that the very source NVRTC compiles for the GPU also runs on the CPU, one
// emulated thread at a time, and can be compared with the host oracle on any
// machine (CI has no GPU). It is test support: Shim stands in for the CUDA
// built-ins the project's kernels use, with IEEE host arithmetic that matches
// the GPU's round-to-nearest intrinsics under -ffp-contract=off (no FMA) and
// NVRTC's --ftz=false.
package cudaemu

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Shim defines the CUDA built-ins the kernels use, for the host compiler.
// Prepend it to a kernel source and a main of the test's own.
const Shim = `
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#define __device__
#define __global__
#define __forceinline__ inline
#define __launch_bounds__(x)
struct dc_dim3 { unsigned x, y, z; };
static dc_dim3 blockIdx, threadIdx, blockDim, gridDim;
struct alignas(16) uint4 { unsigned x, y, z, w; };
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline double __longlong_as_double(long long u) { double f; memcpy(&f, &u, 8); return f; }
static inline long long __double_as_longlong(double f) { long long u; memcpy(&u, &f, 8); return u; }
static inline float __fadd_rn(float a, float b) { volatile float r = a + b; return r; }
static inline float __fsub_rn(float a, float b) { volatile float r = a - b; return r; }
static inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }
static inline float __fdiv_rn(float a, float b) { volatile float r = a / b; return r; }
static inline double __dadd_rn(double a, double b) { volatile double r = a + b; return r; }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
static inline int min(int a, int b) { return a < b ? a : b; }
`

// ErrNoCompiler is returned when no host C++ compiler is found.
var ErrNoCompiler = errors.New("no host C++ compiler (tried $CXX, g++, c++, clang++)")

var (
	mu    sync.Mutex
	built = map[[32]byte]result{}
)

type result struct {
	bin string
	err error
}

// Compile builds source (a whole C++ program) once per process and returns
// the executable's path.
func Compile(name, source string) (string, error) {
	key := sha256.Sum256([]byte(source))
	mu.Lock()
	defer mu.Unlock()
	if r, ok := built[key]; ok {
		return r.bin, r.err
	}
	bin, err := compile(name, source)
	built[key] = result{bin, err}
	return bin, err
}

func compile(name, source string) (string, error) {
	cxx := ""
	for _, c := range []string{os.Getenv("CXX"), "g++", "c++", "clang++"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			cxx = p
			break
		}
	}
	if cxx == "" {
		return "", ErrNoCompiler
	}
	dir, err := os.MkdirTemp("", "detcoll-"+name+"-")
	if err != nil {
		return "", err
	}
	cpp := filepath.Join(dir, name+".cpp")
	if err := os.WriteFile(cpp, []byte(source), 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	cmd := exec.Command(cxx, "-std=c++17", "-O1", "-ffp-contract=off", "-fno-fast-math", "-fno-strict-aliasing", "-Wall", "-Wno-unknown-pragmas",
		"-Wno-unused-function", "-o", bin, cpp)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling %s on the host: %v\n%s", name, err, out)
	}
	return bin, nil
}

// RequireEnv, set to 1 (CI sets it), makes Build fail a test instead of
// skipping it when there is no host compiler, so that CI cannot lose the
// kernels' emulation coverage silently (like DETCOLL_REQUIRE_HIP for HIP).
const RequireEnv = "DETCOLL_REQUIRE_HOSTCC"

// Build is Compile for tests: it skips the test, saying why, when there is
// no host compiler (fails it with RequireEnv=1), and fails it on a compile
// error.
func Build(t testing.TB, name, source string) string {
	t.Helper()
	bin, err := Compile(name, source)
	if errors.Is(err, ErrNoCompiler) {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("cannot emulate %s: %v (%s=1 requires a host C++ compiler)", name, err, RequireEnv)
		}
		t.Skipf("cannot emulate %s: %v", name, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
