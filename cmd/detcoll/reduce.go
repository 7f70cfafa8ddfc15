package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/reduce"
)

func reduceCmd() *cobra.Command {
	var dt, acc, in, out string
	var w int
	cmd := &cobra.Command{
		Use:   "reduce --dtype DT --world-size W --in FILE --out FILE",
		Short: "Reduce W rank buffers (rank-major, raw little-endian) with the canonical tree",
		Long: `reduce reads W rank buffers stored one after another as raw little-endian
elements (W×count elements) and writes the count elements of their canonical
tree reduction: the exact bits every detcoll collective produces.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := dtype.Parse(dt)
			if err != nil {
				return err
			}
			a, err := reduce.ParseAccumulate(acc)
			if err != nil {
				return err
			}
			if w < 1 {
				return fmt.Errorf("--world-size must be at least 1, got %d", w)
			}
			if in == "" || out == "" {
				return fmt.Errorf("--in and --out are required")
			}
			data, err := os.ReadFile(in)
			if err != nil {
				return err
			}
			res, err := reduce.RankMajor(d, a, w, data)
			if err != nil {
				return fmt.Errorf("%s: %w", in, err)
			}
			return os.WriteFile(out, res, 0o644)
		},
	}
	f := cmd.Flags()
	f.StringVar(&dt, "dtype", envDefault("DETCOLL_DTYPE", "fp32"), "element type: bf16, fp16, fp32, fp64 [DETCOLL_DTYPE]")
	f.IntVar(&w, "world-size", 0, "number of rank buffers W in the file")
	f.StringVar(&acc, "accumulate", envDefault("DETCOLL_ACCUMULATE", "native"), "fp16/bf16 accumulation: native or f32 [DETCOLL_ACCUMULATE]")
	f.StringVar(&in, "in", "", "input file: W×count raw little-endian elements, rank-major")
	f.StringVar(&out, "out", "", "output file: count elements")
	return cmd
}
