package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"
)

// Build is the code a report was made with: the commit and whether the
// tree had uncommitted changes, and where that was learnt.
type Build struct {
	Commit string // 40 hex digits, or "unknown"
	Dirty  *bool  // nil when unknown
	// Source is how Commit was found: "ldflags" (stamped at build time,
	// the Makefile's `make detcoll`), "buildinfo" (the Go toolchain's
	// vcs.revision, absent under -buildvcs=false), "checkout" (git run at
	// report time in the detcoll checkout holding the working directory or
	// the executable: the checkout's HEAD, which is the binary's only if it
	// was built from it) or "" when unknown.
	Source string
}

// ResolveBuild finds the commit: the stamped values first (commit and
// dirty as set with -ldflags -X; dirty is "true" or "false"), then the
// build information, then git in a detcoll checkout.
func ResolveBuild(stampedCommit, stampedDirty string) Build {
	if c := strings.TrimSpace(stampedCommit); c != "" && c != "unknown" {
		b := Build{Commit: c, Source: "ldflags"}
		switch strings.TrimSpace(stampedDirty) {
		case "true":
			b.Dirty = boolPtr(true)
		case "false":
			b.Dirty = boolPtr(false)
		}
		return b
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		var b Build
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Dirty = boolPtr(s.Value == "true")
			}
		}
		if b.Commit != "" {
			b.Source = "buildinfo"
			return b
		}
	}
	dirs := []string{}
	if wd, err := os.Getwd(); err == nil {
		dirs = append(dirs, wd)
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	for _, d := range dirs {
		if b, ok := checkoutBuild(d); ok {
			return b
		}
	}
	return Build{Commit: "unknown"}
}

// detcollModule is the line of go.mod that identifies a detcoll checkout.
const detcollModule = "module github.com/detcoll/detcoll"

// checkoutBuild asks git for HEAD and the dirty state of the checkout that
// holds dir, if that checkout is detcoll's (its go.mod names the module).
func checkoutBuild(dir string) (Build, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	git := func(args ...string) (string, error) {
		out, err := exec.CommandContext(ctx, "git", append([]string{"-C", dir}, args...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	top, err := git("rev-parse", "--show-toplevel")
	if err != nil || top == "" {
		return Build{}, false
	}
	mod, err := os.ReadFile(filepath.Join(top, "go.mod"))
	if err != nil || !bytes.HasPrefix(bytes.TrimSpace(mod), []byte(detcollModule)) {
		return Build{}, false
	}
	head, err := git("rev-parse", "HEAD")
	if err != nil || len(head) != 40 {
		return Build{}, false
	}
	b := Build{Commit: head, Source: "checkout"}
	if st, err := git("status", "--porcelain"); err == nil {
		b.Dirty = boolPtr(st != "")
	}
	return b, true
}

func boolPtr(v bool) *bool { return &v }

// moduleVersion is the main module's version, or "dev" for a development build.
func moduleVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
