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
	"syscall"

	"github.com/spf13/cobra"
)

// version is set with -ldflags "-X main.version=…" by release builds.
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := &cobra.Command{
		Use:           "detcoll",
		Short:         "Deterministic collective communication: same bits on every rank, run, size, algorithm and device",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(reduceCmd())
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	root.SetArgs(normalizeListFlags(os.Args[1:]))
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "detcoll:", err)
		var ec interface{ ExitCode() int }
		if errors.As(err, &ec) {
			os.Exit(ec.ExitCode())
		}
		os.Exit(1)
	}
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
