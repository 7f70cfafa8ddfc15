package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/detcoll/detcoll/launch"
)

func init() { extraCommands = append(extraCommands, launchCmd) }

type exitError struct {
	err  error
	code int
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }
func (e exitError) ExitCode() int { return e.code }

type reportError struct{ we *launch.WorkerError }

func (e reportError) Error() string { return e.we.Report() }
func (e reportError) Unwrap() error { return e.we }

func launchCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "launch [flags] CMD [ARGS...]",
		Short: "Start a job's workers with torchrun's flags and environment (store on node 0, rank-prefixed output)",
		Long: `launch starts --nproc-per-node workers on this node with torchrun's
environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT,
TORCHELASTIC_*, …) and detcoll's (DETCOLL_RANK, DETCOLL_STORE_ADDR, …), node 0
serving detcoll's rendezvous store. It takes torchrun's flags (dashes or
underscores) and stops parsing at the first argument that is not a flag, as
torchrun does. Run "detcoll launch --help" for the flags; docs/launcher.md
maps every torchrun flag and variable.`,
		// The launcher parses its own flags, torchrun's way: flags end at
		// the first positional, which begins the worker command.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := launch.ParseArgs(args, os.Getenv)
			if errors.Is(err, launch.ErrHelp) {
				launch.PrintUsage(cmd.OutOrStdout())
				return nil
			}
			if err != nil {
				return exitError{err, 2}
			}
			cfg.Stdout, cfg.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			sig := make(chan os.Signal, 2)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sig)
			cfg.Signals = sig
			err = launch.Run(context.Background(), cfg)
			if err != nil {
				var we *launch.WorkerError
				if errors.As(err, &we) {
					// The root cause with the failing rank's last lines.
					return exitError{reportError{we}, launch.ExitCode(err)}
				}
				return exitError{err, launch.ExitCode(err)}
			}
			return nil
		},
	}
}
