package nvrtc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/detcoll/detcoll/internal/binding/rtc"
	"github.com/detcoll/detcoll/internal/kcache"
)

// LibraryEnv overrides LibraryNames.
const LibraryEnv = "DETCOLL_NVRTC_LIB"

// CacheEnv overrides the disk cache directory (internal/kcache, shared
// with internal/hiprtc).
const CacheEnv = kcache.Env

// LibraryNames are the candidates, newest first. Absolute paths under
// $CUDA_HOME (or /usr/local/cuda) follow the plain names because the
// toolkit's lib64 is often not on the loader path.
func LibraryNames() []string {
	names := []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so.11.2", "libnvrtc.so"}
	roots := []string{}
	for _, v := range []string{"CUDA_HOME", "CUDA_PATH"} {
		if r := os.Getenv(v); r != "" {
			roots = append(roots, r)
		}
	}
	roots = append(roots, "/usr/local/cuda")
	for _, r := range roots {
		for _, n := range []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"} {
			names = append(names, filepath.Join(r, "lib64", n))
		}
	}
	return names
}

// ErrUnavailable is wrapped by errors meaning "no usable NVRTC here".
var ErrUnavailable = errors.New("nvrtc: unavailable")

// Result is internal/binding/rtc's (hiprtc mirrors NVRTC's codes); its
// constants are rtc.Result*.
type Result = rtc.Result

// Available reports why NVRTC cannot be used here, or nil (it loads the
// library once per process).
func Available() error { return lib.Init() }

// LibraryPath is the NVRTC library loaded ("" if none).
func LibraryPath() string { return lib.Path() }

// VersionString is NVRTC's "major.minor", "" when unavailable.
func VersionString() string { return lib.VersionString() }

// SupportedArchs lists the real architectures NVRTC can target (e.g. 90 for
// sm_90), ascending. An NVRTC too old to say returns nil, nil.
func SupportedArchs() ([]int, error) {
	if err := lib.Init(); err != nil {
		return nil, err
	}
	a, err := rSupportedArchs()
	sort.Ints(a)
	return a, err
}

// Target picks the compilation target for a device of compute capability cc
// (major*10+minor): the real architecture itself (CUBIN) when supported is
// empty (unknown) or lists it, otherwise PTX for the newest listed
// architecture below cc. An error if every listed architecture is newer.
func Target(cc int, supported []int) (arch int, cubin bool, err error) {
	if cc <= 0 {
		return 0, false, fmt.Errorf("nvrtc: invalid compute capability %d", cc)
	}
	if len(supported) == 0 {
		return cc, true, nil
	}
	best := 0
	for _, a := range supported {
		if a == cc {
			return cc, true, nil
		}
		if a < cc && a > best {
			best = a
		}
	}
	if best == 0 {
		return 0, false, fmt.Errorf("nvrtc: compute capability %d.%d is older than every architecture this NVRTC supports (%v)", cc/10, cc%10, supported)
	}
	return best, false, nil
}

// ArithmeticOptions are always passed: no fast math, no flush-to-zero,
// IEEE division and square root, no multiply-add contraction.
var ArithmeticOptions = []string{"--ftz=false", "--prec-div=true", "--prec-sqrt=true", "--fmad=false"}

// Options builds the option list: the architecture (sm_XY for CUBIN,
// compute_XY for PTX), the arithmetic options, C++17, then extra. extra
// must not weaken the arithmetic options; such options are rejected.
func Options(arch int, cubin bool, extra ...string) ([]string, error) {
	kind := "compute_"
	if cubin {
		kind = "sm_"
	}
	opts := []string{fmt.Sprintf("--gpu-architecture=%s%d", kind, arch)}
	opts = append(opts, ArithmeticOptions...)
	opts = append(opts, "--std=c++17")
	for _, x := range extra {
		l := strings.ToLower(x)
		for _, bad := range []string{"fast-math", "use_fast_math", "ftz=true", "ftz true", "fmad=true", "prec-div=false", "prec-sqrt=false", "gpu-arch", "-arch"} {
			if strings.Contains(l, bad) {
				return nil, fmt.Errorf("nvrtc: option %q is not allowed (docs/contract.md, section add(a, b) per dtype; the architecture is chosen by Target)", x)
			}
		}
		opts = append(opts, x)
	}
	return opts, nil
}

// CacheKey is the hex sha256 of everything that determines the image
// (kcache.Key over the NVRTC version, the architecture and the image kind).
func CacheKey(source string, options []string, nvrtcVersion string, arch int, cubin bool) string {
	kind := "ptx"
	if cubin {
		kind = "cubin"
	}
	return kcache.Key("detcoll-kernel-cache-v1", []string{nvrtcVersion, strconv.Itoa(arch), kind}, options, source)
}

// CacheDir is the disk cache directory: $DETCOLL_CACHE_DIR, else
// os.UserCacheDir()/detcoll/kernels, else "" (no disk cache).
func CacheDir() string { return kcache.Dir() }

// Program is a compiled image.
type Program struct {
	Image   []byte   // CUBIN, or PTX with a terminating NUL
	CUBIN   bool     // false: PTX for the driver to JIT
	Arch    int      // the architecture compiled for (90 = sm_90/compute_90)
	Options []string // the options used
	Log     string   // the compiler's log (warnings), if any
	Key     string   // the cache key
	From    string   // "compiled", "memory" or "disk"
	Version string   // NVRTC "major.minor"
}

var (
	mu       sync.Mutex // serialises the compiler
	memCache kcache.Memory[Program]
)

// Compile compiles source without any cache. name is the program name used
// in messages. The image is CUBIN when cubin is true (options must name an
// sm_ architecture), else PTX with a terminating NUL.
func Compile(source, name string, options []string, cubin bool) (image []byte, log string, err error) {
	if err := lib.Init(); err != nil {
		return nil, "", err
	}
	mu.Lock()
	defer mu.Unlock()
	return rCompile(source, name, options, cubin)
}

// Build compiles source for a device of compute capability cc (major*10 +
// minor), using and filling the caches.
func Build(source, name string, cc int, extra ...string) (*Program, error) {
	if err := lib.Init(); err != nil {
		return nil, err
	}
	archs, err := SupportedArchs()
	if err != nil {
		return nil, err
	}
	arch, cubin, err := Target(cc, archs)
	if err != nil {
		return nil, err
	}
	opts, err := Options(arch, cubin, extra...)
	if err != nil {
		return nil, err
	}
	ver := VersionString()
	key := CacheKey(source, opts, ver, arch, cubin)

	base := Program{CUBIN: cubin, Arch: arch, Options: opts, Key: key, Version: ver}
	return memCache.Fetch(key, cachePath(key, cubin), setFrom,
		func(b []byte) *Program { p := base; p.Image = b; return &p },
		func() (*Program, []byte, error) {
			img, log, err := Compile(source, name, opts, cubin)
			if err != nil {
				return nil, nil, err
			}
			p := base
			p.Image, p.Log = img, log
			return &p, img, nil
		})
}

func setFrom(p *Program, from string) { p.From = from }

// Invalidate forgets a cached image (memory and disk), e.g. after the driver
// refused to load it.
func Invalidate(key string) { memCache.Invalidate(key, ".cubin", ".ptx") }

func cachePath(key string, cubin bool) string {
	if cubin {
		return kcache.Path(key, ".cubin")
	}
	return kcache.Path(key, ".ptx")
}
