//go:build cgo

package app

import (
	"context"
	"fmt"

	"github.com/detcoll/detcoll/cluster"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu/devverify"
)

// verifyDeviceJob is devverify.VerifyJob on vendor ("cuda" or "rocm"), rows
// labelled with transport ("nccl" or "rccl").
func verifyDeviceJob(ctx context.Context, job *cluster.Job, vendor, transport string) ([]VerifyResult, error) {
	res, err := devverify.VerifyJob(ctx, job, devverify.VerifyOptions{Vendor: vendor})
	rows := make([]VerifyResult, 0, len(res))
	for _, r := range res {
		dt, _ := dtype.Parse(r.DType)
		row := VerifyResult{Transport: transport, World: job.Comm.Size(), Op: r.Operation, DType: dt, Algorithm: r.Algorithm,
			Accum: r.Case, Pass: r.Error == "" && r.Bitwise && r.Stable, Detail: r.Error}
		if row.Detail == "" && !row.Pass {
			row.Detail = fmt.Sprintf("oracle_bitwise=%v repeat_bitwise=%v", r.Bitwise, r.Stable)
		}
		rows = append(rows, row)
	}
	return rows, err
}
