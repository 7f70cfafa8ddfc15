package app

import (
	"sort"
	"strings"
)

// EnvSection is one GPU kind's part of `detcoll env`, registered by the
// file that brings that kind into the build (cuda.go, rocm.go): which kinds
// a binary reports is decided by its build tags (docs/rocm.md, "Build
// isolation").
type EnvSection struct {
	Kind string        // "cuda", "rocm"
	Key  string        // the key of JSON in `detcoll env --json`
	Text func() string // the human-readable lines
	JSON func() any    // the JSON value
}

var envSections []EnvSection

// registerEnv adds a section (from an init function).
func registerEnv(s EnvSection) {
	envSections = append(envSections, s)
	sort.Slice(envSections, func(i, j int) bool { return envSections[i].Kind < envSections[j].Kind })
}

// GPUKinds lists the GPU kinds this binary was built with, sorted ("cuda",
// "rocm"; none for CGO_ENABLED=0 builds).
func GPUKinds() []string {
	var k []string
	for _, s := range envSections {
		k = append(k, s.Kind)
	}
	return k
}

// EnvReport is the GPU part of `detcoll env`: the kinds built in, then each
// kind's section. It never fails.
func EnvReport() string {
	var b strings.Builder
	kinds := GPUKinds()
	switch {
	case len(kinds) > 0:
		b.WriteString("GPU kinds in this build: " + strings.Join(kinds, ", ") + "\n")
	case !cgoEnabled:
		b.WriteString("GPU kinds in this build: none (built without cgo: GPU libraries cannot be loaded)\n")
	default:
		b.WriteString("GPU kinds in this build: none\n")
	}
	for _, s := range envSections {
		b.WriteString("-- " + s.Kind + "\n")
		b.WriteString(s.Text())
	}
	return b.String()
}

// EnvJSON is the GPU part of `detcoll env --json`: "gpu_kinds" and one key
// per kind ("gpu" for CUDA, as before ROCm existed; "rocm").
func EnvJSON() map[string]any {
	m := map[string]any{"gpu_kinds": GPUKinds()}
	for _, s := range envSections {
		m[s.Key] = s.JSON()
	}
	return m
}
