// Command detcoll is the deterministic-collectives tool: bench, launch,
// store, reduce, verify and env. Each subcommand parses flags and the
// environment and calls a package; the logic lives in the packages.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/bench"
	"github.com/detcoll/detcoll/cmd/detcoll/internal/app"
	"github.com/detcoll/detcoll/launch"
)

// version, commit and dirty are stamped at build time by the Makefile
// (`make detcoll`): -ldflags "-X main.version=… -X main.commit=… -X
// main.dirty=true|false". Unstamped builds find the commit at run time
// (bench.ResolveBuild: the Go build information, else git in a detcoll
// checkout), since this toolchain builds with -buildvcs=false.
var (
	version = "dev"
	commit  = ""
	dirty   = ""
)

// build is the code this binary was made from, resolved once.
var build = sync.OnceValue(func() bench.Build { return bench.ResolveBuild(commit, dirty) })

// versionLine is what `detcoll --version` prints.
func versionLine() string {
	b := build()
	state := "dirty state unknown"
	if b.Dirty != nil {
		state = map[bool]string{true: "dirty", false: "clean"}[*b.Dirty]
	}
	src := ""
	if b.Source != "" {
		src = ", from " + b.Source
	}
	return fmt.Sprintf("detcoll %s, commit %s (%s%s), contract %s, %s\n", version, b.Commit, state, src, detcoll.ContractVersion, runtime.Version())
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	sigCtx = ctx
	root := &cobra.Command{
		Use:           "detcoll",
		Short:         "Deterministic collective communication: same bits on every rank, run, size, algorithm and device",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cobra.AddTemplateFunc("detcollVersion", versionLine) // resolved only when --version asks
	root.SetVersionTemplate("{{detcollVersion}}")
	// A flag the parser rejects is a usage error (exit status 2).
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return app.Usage("", err) })
	root.AddCommand(reduceCmd())
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	root.SetArgs(normalizeListFlags(os.Args[1:]))
	err := root.ExecuteContext(ctx)
	if err != nil {
		reportFailure(err)
		stop()
		var ec interface{ ExitCode() int }
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
	stop()
}

// sigCtx is main's context, cancelled by SIGINT or SIGTERM (a launcher
// stopping the job): its cause names the signal.
var sigCtx context.Context = context.Background()

// reported is set once reportFailure has printed this process's error.
var reported atomic.Bool

// reportFailure prints err once, as soon as a command fails: under a
// launcher the FailureMarker line first, which names the peer the error
// names, so the launcher can blame the root cause (docs/launcher.md), then
// "detcoll: err" (unless err is quiet: another rank reports it). An error
// that a signal caused says so, with what the rank was doing. Later calls
// print nothing; commands call it before their clean-up (BenchOptions.Report)
// and main once more at exit.
func reportFailure(err error) {
	if err == nil || !reported.CompareAndSwap(false, true) {
		return
	}
	err = interrupted(sigCtx, err)
	launch.ReportFailure(os.Stderr, err)
	var q interface{ Quiet() bool }
	if !errors.As(err, &q) || !q.Quiet() {
		fmt.Fprintln(os.Stderr, "detcoll:", err)
	}
}

// interrupted prefixes err with the signal that cancelled ctx when err is
// that cancellation ("terminated signal received: bench: native
// all_reduce: transport: recv rank 0 peer 2: context canceled").
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() == nil || !errors.Is(err, context.Canceled) {
		return err
	}
	cause := context.Cause(ctx)
	if cause == nil || cause == ctx.Err() {
		return err
	}
	return fmt.Errorf("%v: %w", cause, err)
}

// extraCommands are registered by the other files of this package.
var extraCommands []func() *cobra.Command

// envDefault returns the environment variable's value, or def.
func envDefault(name, def string) string {
	if v, ok := os.LookupEnv(name); ok && v != "" {
		return v
	}
	return def
}
