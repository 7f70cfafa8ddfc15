package devcomm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/cluster"
)

// TestChoose: the automatic choice as a table over (op, size, W, topology)
// with the measured thresholds and with overridden ones, and forced
// algorithms with and without peer memory.
func TestChoose(t *testing.T) {
	d := DefaultThresholds()
	tight := d
	tight.A2ABytes, tight.A2ABytesTwoRanks, tight.OneShotBytes, tight.IPCReduceBytes, tight.IPCGatherBytes = 100, 200, 1000, 5000, 3000
	const (
		ar, ag, rs, agm, rsm    = opAllReduce, opAllGather, opReduceScatter, opAllGatherMany, opReduceScatterMany
		auto, gt, a2a, one, two = detcoll.Auto, detcoll.GatherTree, detcoll.A2ATree, detcoll.OneShot, detcoll.TwoShot
	)
	cases := []struct {
		op    collOp
		asked detcoll.Algorithm
		bytes int
		w     int
		ipc   bool
		th    Thresholds
		want  detcoll.Algorithm
	}{
		// AllReduce over NCCL: gather_tree below the threshold, a2a_tree from it.
		{ar, auto, AutoA2ABytesTwoRanks - 1, 2, false, d, gt},
		{ar, auto, AutoA2ABytesTwoRanks, 2, false, d, a2a},
		{ar, auto, AutoA2ABytes - 1, 4, false, d, gt},
		{ar, auto, AutoA2ABytes, 4, false, d, a2a},
		{ar, auto, 1 << 40, 1, false, d, gt},
		{ar, auto, 99, 3, false, tight, gt},
		{ar, auto, 100, 3, false, tight, a2a},
		{ar, auto, 200, 2, false, tight, a2a},
		// recursive_doubling has no device form: gather_tree, with peer memory too.
		{ar, detcoll.RecursiveDoubling, 4096, 8, false, d, gt},
		{ar, detcoll.RecursiveDoubling, 4096, 8, true, d, gt},
		{rs, detcoll.RecursiveDoubling, 4096, 4, false, d, a2a},
		{ag, detcoll.RecursiveDoubling, 4096, 4, false, d, gt},
		{ar, detcoll.HalvingDoubling, 1 << 20, 8, false, d, a2a},
		{rs, detcoll.HalvingDoubling, 1 << 20, 8, false, d, a2a},
		// With peer memory: one-shot while (W-1)·bytes fits, two-shot above,
		// NCCL above IPCReduceBytes when set.
		{ar, auto, AutoOneShotBytes, 2, true, d, one},
		{ar, auto, AutoOneShotBytes + 1, 2, true, d, two},
		{ar, auto, AutoOneShotBytes / 3, 4, true, d, one},
		{ar, auto, AutoOneShotBytes/3 + 1, 4, true, d, two},
		{ar, auto, 1 << 40, 8, true, d, two},
		{ar, auto, 1000, 2, true, tight, one},
		{ar, auto, 5000, 2, true, tight, two},
		{ar, auto, 5001, 2, true, tight, a2a},
		{ar, auto, 5001, 3, true, tight, a2a},
		// Forced: as asked with peer memory, the NCCL twin without.
		{ar, one, 1 << 30, 2, true, d, one},
		{ar, two, 1, 2, true, d, two},
		{ar, gt, 1, 2, true, d, gt},
		{ar, one, 1, 2, false, d, gt},
		{ar, two, 1, 2, false, d, a2a},
		{ar, a2a, 1, 2, false, d, a2a},
		// All-gathers: OneShot means peer memory, GatherTree NCCL.
		{ag, auto, 1 << 40, 2, true, d, one},
		{ag, auto, 3000, 2, true, tight, one},
		{ag, auto, 3001, 2, true, tight, gt},
		{ag, auto, 1, 2, false, d, gt},
		{ag, two, 1, 2, true, d, one},
		{ag, a2a, 1, 2, true, d, gt},
		{agm, one, 1, 2, false, d, gt},
		// Reduce-scatters: Auto is a2a_tree over NCCL, two-shot with peer memory.
		{rs, auto, 1 << 40, 2, false, d, a2a},
		{rs, auto, 1, 8, false, d, a2a},
		{rs, auto, 1 << 40, 2, true, d, two},
		{rs, auto, 5001, 2, true, tight, a2a},
		{rs, one, 1, 2, true, d, two},
		{rs, gt, 1, 2, true, d, gt},
		{rs, gt, 1, 3, false, d, gt},
		{rsm, one, 1, 2, false, d, gt},
		{rsm, two, 1, 2, false, d, a2a},
	}
	for _, c := range cases {
		if got := choose(c.op, c.asked, c.bytes, c.w, c.ipc, c.th); got != c.want {
			t.Errorf("choose(%v, %v, %d bytes, W=%d, ipc=%v) = %v, want %v", c.op, c.asked, c.bytes, c.w, c.ipc, got, c.want)
		}
	}
}

// TestThresholdsCheck: bad thresholds are refused; the defaults pass.
func TestThresholdsCheck(t *testing.T) {
	if err := DefaultThresholds().check(); err != nil {
		t.Fatal(err)
	}
	for _, mut := range []func(*Thresholds){
		func(t *Thresholds) { t.A2ABytes = -1 },
		func(t *Thresholds) { t.IPCMaxBlocks = 0 },
		func(t *Thresholds) { t.IPCMaxBlocks = ipcMaxB + 1 },
		func(t *Thresholds) { t.IPCBlockBytes = 1023 },
		func(t *Thresholds) { t.ListInputs = -2 },
	} {
		th := DefaultThresholds()
		mut(&th)
		if th.check() == nil {
			t.Errorf("%+v accepted", th)
		}
	}
}

// TestThresholdsFromEnv: the environment overrides the peer-memory
// thresholds at New (not per call), and bad values are refused.
func TestThresholdsFromEnv(t *testing.T) {
	t.Setenv(IPCOneShotBytesEnv, "12345")
	t.Setenv(IPCBlocksEnv, "7")
	cfg, err := defaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.th.OneShotBytes != 12345 || cfg.th.IPCMaxBlocks != 7 || cfg.th.A2ABytes != AutoA2ABytes {
		t.Fatalf("thresholds %+v", cfg.th)
	}
	t.Setenv(IPCBlocksEnv, "999")
	if _, err := defaultConfig(); err == nil {
		t.Fatal("an out-of-range DETCOLL_IPC_BLOCKS was accepted")
	}
}

// TestNewRejectsBadThresholds: WithThresholds and WithWaitTimeout are
// checked at New, before any device work, on every rank.
func TestNewRejectsBadThresholds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, err := cluster.Init(ctx, cluster.Options{Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	bad := DefaultThresholds()
	bad.IPCMaxBlocks = 0
	for _, o := range []Option{WithThresholds(bad), WithWaitTimeout(0)} {
		c, err := New(ctx, job, o)
		if err == nil {
			c.Close()
			t.Fatal("New accepted a bad option")
		}
		if !errors.Is(err, detcoll.ErrInvalidArgument) {
			t.Fatalf("New = %v, want ErrInvalidArgument", err)
		}
	}
}
