package main

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cmd/detcoll/internal/app"
	"github.com/detcoll/detcoll/launch"
)

func init() { extraCommands = append(extraCommands, verifyCmd, envCmd) }

func verifyCmd() *cobra.Command {
	var worlds, transports, counts []string
	var device string
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Check every collective, dtype, algorithm, transport and device against the host oracle",
		Long: `verify runs AllReduce, AllGather, ReduceScatter and the many-lane variants for
every dtype, algorithm and accumulate mode, over every available transport and
device, compares each result bit for bit with the host oracle, prints a
pass/fail table and exits non-zero on any mismatch. Run it on a new cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o := app.VerifyOptions{Transports: splitList(transports), Out: cmd.OutOrStdout()}
			for _, s := range splitList(worlds) {
				n, err := strconv.Atoi(s)
				if err != nil || n < 1 {
					return app.Usagef("--world-sizes", "%q is not a positive integer", s)
				}
				o.WorldSizes = append(o.WorldSizes, n)
			}
			for _, s := range splitList(counts) {
				n, err := strconv.Atoi(s)
				if err != nil || n < 0 {
					return app.Usagef("--counts", "%q is not a count", s)
				}
				o.Counts = append(o.Counts, n)
			}
			switch device {
			case "auto", "cpu", "cuda", "rocm":
			default:
				return app.Usagef("--device", "%q is not auto, cpu, cuda or rocm", device)
			}
			o.Device = device
			if app.Launched(os.Getenv) {
				_, err := app.VerifyJob(cmd.Context(), o)
				return err
			}
			_, err := app.VerifyDevice(cmd.Context(), o)
			return err
		},
	}
	cmd.Flags().StringSliceVar(&worlds, "world-sizes", []string{"1,2,3,4,5,8"}, "world sizes of the in-process groups")
	cmd.Flags().StringSliceVar(&transports, "transports", []string{"inproc,tcp"}, "host transports to check")
	cmd.Flags().StringSliceVar(&counts, "counts", nil, "element counts per rank (default 1 7 1031 65537)")
	cmd.Flags().StringVar(&device, "device", envDefault("DETCOLL_DEVICE", "auto"), "the device whose collectives to check: auto (a GPU if one is usable), cpu, cuda or rocm; cuda or rocm fail when none of that device's collectives could run (under a launcher: across the job; alone: as a job of one rank) [DETCOLL_DEVICE]")
	return cmd
}

func envCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Print what detcoll finds here: version, contract, launcher environment, GPUs and libraries",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			lenv, lerr := launch.FromEnv(os.Getenv)
			if asJSON {
				// "gpu" (NVIDIA) and "rocm" (AMD) are there when the build has them.
				m := app.EnvJSON()
				b := build()
				for k, v := range map[string]any{"detcoll_version": version, "git_commit": b.Commit, "git_dirty": b.Dirty,
					"contract": detcoll.ContractVersion, "go": runtime.Version(),
					"gomaxprocs": runtime.GOMAXPROCS(0), "launch_env": redactedEnv(lenv, lerr)} {
					m[k] = v
				}
				return json.NewEncoder(cmd.OutOrStdout()).Encode(m)
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "detcoll %s, contract %s, %s %s/%s, GOMAXPROCS=%d\n", version, detcoll.ContractVersion, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0))
			if lerr != nil {
				fmt.Fprintf(w, "launcher environment: invalid: %v\n", lerr)
			} else {
				fmt.Fprintf(w, "launcher environment: %s: rank %d of %d (local %d of %d), store %q\n", lenv.Source, lenv.Rank, lenv.WorldSize, lenv.LocalRank, lenv.LocalWorldSize, lenv.StoreAddr)
			}
			fmt.Fprintln(w, "host transports: inproc, tcp")
			fmt.Fprint(w, app.EnvReport())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// redactedEnv is the launcher environment for `detcoll env --json`
// without the store token: whether one is set, never its value.
func redactedEnv(e launch.Env, err error) map[string]any {
	m := map[string]any{"rank": e.Rank, "world_size": e.WorldSize, "local_rank": e.LocalRank,
		"local_world_size": e.LocalWorldSize, "store_addr": e.StoreAddr, "source": e.Source, "token_set": e.Token != ""}
	if err != nil {
		m["error"] = err.Error()
	}
	return m
}
