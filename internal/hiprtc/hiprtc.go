package hiprtc

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/detcoll/detcoll/internal/binding/rtc"
	"github.com/detcoll/detcoll/internal/kcache"
)

// ErrUnavailable is wrapped by errors meaning "no usable hiprtc here".
var ErrUnavailable = errors.New("hiprtc: unavailable")

// ErrTargetUnsupported is wrapped when the loaded hiprtc (its comgr) does
// not know the processor asked for.
var ErrTargetUnsupported = errors.New("hiprtc: target not supported by this hiprtc")

// Result is internal/binding/rtc's (hiprtc mirrors NVRTC's codes); its
// constants are rtc.Result*.
type Result = rtc.Result

var (
	comgrOnce sync.Once
	comgrISAs []string
	comgrErr  error
)

// Available reports why hiprtc cannot be used here, or nil (it loads the
// library once per process).
func Available() error { return lib.Init() }

// LibraryPath is the hiprtc library loaded ("" if none).
func LibraryPath() string { return lib.Path() }

// VersionString is hiprtc's "major.minor", "" when unavailable.
func VersionString() string { return lib.VersionString() }

// SupportedTargets lists the processors (gfx90a, gfx942, …) that the
// code object manager next to hiprtc can compile for, sorted; nil with an
// error when comgr cannot be loaded (then the list is unknown).
func SupportedTargets() ([]string, error) {
	comgrOnce.Do(func() {
		isas, err := rComgrISAs()
		if err != nil {
			comgrErr = err
			return
		}
		seen := map[string]bool{}
		for _, isa := range isas {
			// "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-" → gfx90a
			_, id, ok := strings.Cut(isa, "--")
			if !ok {
				continue
			}
			if p, _, err := ParseTargetID(id); err == nil && !seen[p] {
				seen[p] = true
				comgrISAs = append(comgrISAs, p)
			}
		}
		sort.Strings(comgrISAs)
	})
	return comgrISAs, comgrErr
}

// ComgrPath is the comgr library that SupportedTargets loaded ("" if none).
func ComgrPath() string {
	if _, err := SupportedTargets(); err != nil {
		return ""
	}
	return comgrPath()
}

var processorRE = regexp.MustCompile(`^gfx[0-9a-f]{3,4}$|^gfx[0-9]+(-[0-9]+)?-generic$`)

// ParseTargetID splits an AMD GPU target ID, the gcnArchName of a device
// (e.g. "gfx942:sramecc+:xnack-"), into its processor ("gfx942") and its
// feature settings (["sramecc+", "xnack-"]).
func ParseTargetID(id string) (processor string, features []string, err error) {
	parts := strings.Split(strings.TrimSpace(id), ":")
	processor = parts[0]
	if !processorRE.MatchString(processor) {
		return "", nil, fmt.Errorf("hiprtc: %q is not an AMD GPU target (want e.g. gfx942 or gfx90a:sramecc+:xnack-)", id)
	}
	for _, f := range parts[1:] {
		if len(f) < 2 || (f[len(f)-1] != '+' && f[len(f)-1] != '-') {
			return "", nil, fmt.Errorf("hiprtc: target %q: feature %q is not <name>+ or <name>-", id, f)
		}
		features = append(features, f)
	}
	return processor, features, nil
}

// ArithmeticOptions are always passed: no contraction, no fast math, f32
// denormals kept (see the package doc).
var ArithmeticOptions = []string{"-ffp-contract=off", "-fno-fast-math", "-fno-gpu-flush-denormals-to-zero"}

// forbidden are option prefixes that would change values or the target.
var forbidden = []string{
	"-ffast-math", "-funsafe-math-optimizations", "-fassociative-math", "-freciprocal-math",
	"-fapprox-func", "-ffinite-math-only", "-fno-honor-nans", "-fno-honor-infinities",
	"-ffp-contract", "-fgpu-flush-denormals-to-zero", "-fcuda-flush-denormals-to-zero",
	"-fdenormal-fp-math", "-ffp-model", "-fno-signed-zeros", "-ocml", "-mcode-object",
	"--offload-arch", "-offload-arch", "--gpu-architecture", "-mcpu", "-march", "--amdgpu-target",
	"--cuda-gpu-arch", "-fgpu-rdc",
}

// Options builds the option list for a processor: the target, -O3, C++17,
// the arithmetic options, then extra. extra must not weaken the arithmetic
// options nor name another target; such options are rejected.
func Options(processor string, extra ...string) ([]string, error) {
	if !processorRE.MatchString(processor) {
		return nil, fmt.Errorf("hiprtc: %q is not a processor (want e.g. gfx942; ParseTargetID strips features)", processor)
	}
	opts := []string{"--offload-arch=" + processor, "-O3", "-std=c++17"}
	opts = append(opts, ArithmeticOptions...)
	for _, x := range extra {
		l := strings.ToLower(strings.TrimSpace(x))
		for _, bad := range forbidden {
			if strings.HasPrefix(l, bad) {
				return nil, fmt.Errorf("hiprtc: option %q is not allowed (docs/contract.md, section add(a, b) per dtype; the target is chosen by Build)", x)
			}
		}
		opts = append(opts, x)
	}
	return opts, nil
}

// CacheKey is the hex sha256 of everything that determines the image
// (kcache.Key over the hiprtc version, the library file and the processor).
func CacheKey(source string, options []string, hiprtcVersion, library, processor string) string {
	return kcache.Key("detcoll-hip-kernel-cache-v1", []string{hiprtcVersion, library, processor}, options, source)
}

// CacheDir is the disk cache directory: $DETCOLL_CACHE_DIR, else
// os.UserCacheDir()/detcoll/kernels, else "" (no disk cache).
func CacheDir() string { return kcache.Dir() }

// Program is a compiled code object.
type Program struct {
	Image     []byte      // the code object (an AMDGPU ELF) for hipModuleLoadData
	Processor string      // e.g. gfx942
	Options   []string    // the options used
	Log       string      // the compiler's log (warnings), if any
	Key       string      // the cache key
	From      string      // "compiled", "memory" or "disk"
	Version   string      // hiprtc "major.minor"
	Object    *CodeObject // what Inspect found in Image
}

var (
	mu       sync.Mutex // serialises the compiler
	memCache kcache.Memory[Program]
)

// Compile compiles source without any cache or check. name is the program
// name used in messages; options must name the target (see Options).
func Compile(source, name string, options []string) (image []byte, log string, err error) {
	if err := lib.Init(); err != nil {
		return nil, "", err
	}
	mu.Lock()
	defer mu.Unlock()
	return rCompile(source, name, options)
}

// CheckTarget reports whether the loaded hiprtc can compile for processor:
// nil when comgr lists it or when the list is unknown; an error wrapping
// ErrTargetUnsupported otherwise.
func CheckTarget(processor string) error {
	list, err := SupportedTargets()
	if err != nil || len(list) == 0 {
		return nil
	}
	for _, p := range list {
		if p == processor {
			return nil
		}
	}
	return fmt.Errorf("%w: %s (hiprtc %s at %s knows %s)", ErrTargetUnsupported, processor, VersionString(), LibraryPath(), strings.Join(list, " "))
}

// Build compiles source for the device whose gcnArchName (target ID) is
// target, using and filling the caches, and checks the code object
// (Inspect, CheckArithmetic) before returning or caching it.
func Build(source, name, target string, extra ...string) (*Program, error) {
	if err := lib.Init(); err != nil {
		return nil, err
	}
	proc, _, err := ParseTargetID(target)
	if err != nil {
		return nil, err
	}
	if err := CheckTarget(proc); err != nil {
		return nil, err
	}
	opts, err := Options(proc, extra...)
	if err != nil {
		return nil, err
	}
	ver := VersionString()
	libFile := LibraryPath()
	if real, err := filepath.EvalSymlinks(libFile); err == nil {
		libFile = real // e.g. libamdhip64.so.5.2.21153: the patch level counts
	}
	key := CacheKey(source, opts, ver, filepath.Base(libFile), proc)

	base := Program{Processor: proc, Options: opts, Key: key, Version: ver}
	return memCache.Fetch(key, cachePath(key), func(p *Program, from string) { p.From = from },
		func(b []byte) *Program {
			obj, err := checkImage(b, proc)
			if err != nil {
				return nil // recompile: the cached file is not a code object detcoll accepts
			}
			p := base
			p.Image, p.Object = b, obj
			return &p
		},
		func() (*Program, []byte, error) {
			img, log, err := Compile(source, name, opts)
			if err != nil {
				return nil, nil, err
			}
			obj, err := checkImage(img, proc)
			if err != nil {
				return nil, nil, fmt.Errorf("hiprtc: %s for %s: %w", name, proc, err)
			}
			p := base
			p.Image, p.Object, p.Log = img, obj, log
			return &p, img, nil
		})
}

func checkImage(img []byte, proc string) (*CodeObject, error) {
	obj, err := Inspect(img)
	if err != nil {
		return nil, err
	}
	if err := obj.CheckArithmetic(); err != nil {
		return nil, err
	}
	if obj.Processor != "" && obj.Processor != proc {
		return nil, fmt.Errorf("code object is for %s, not %s", obj.Processor, proc)
	}
	return obj, nil
}

// Invalidate forgets a cached image (memory and disk), e.g. after the
// runtime refused to load it.
func Invalidate(key string) { memCache.Invalidate(key, ".hsaco") }

func cachePath(key string) string { return kcache.Path(key, ".hsaco") }
