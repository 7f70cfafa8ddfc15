package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
	cfg, cfgErr := launch.ConfigFromEnv(os.Getenv)
	cmd := &cobra.Command{
		Use:   "launch [flags] -- CMD ARGS...",
		Short: "Start a job's workers with torchrun's conventions (store on node 0, rank-prefixed output)",
		Long: `launch starts --nproc-per-node workers on this node with torchrun's
environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, …) and
detcoll's (DETCOLL_RANK, DETCOLL_STORE_ADDR, …), node 0 serving detcoll's
rendezvous store. Every output line is prefixed with its rank; SIGINT and
SIGTERM are forwarded; on the first worker failure the others are stopped and
the failing rank is reported with its exit status and last lines. Every flag
also reads an environment variable (shown in its help).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cfgErr != nil {
				return cfgErr
			}
			if len(args) == 0 {
				return fmt.Errorf("launch: no command (usage: detcoll launch [flags] -- CMD ARGS...)")
			}
			cfg.Cmd = args
			cfg.Stdout, cfg.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			sig := make(chan os.Signal, 2)
			signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
			defer signal.Stop(sig)
			cfg.Signals = sig
			err := launch.Run(context.Background(), cfg)
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
	gofs := flag.NewFlagSet("launch", flag.ContinueOnError)
	cfg.RegisterFlags(gofs)
	cmd.Flags().AddGoFlagSet(gofs)
	return cmd
}
