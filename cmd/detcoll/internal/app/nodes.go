package app

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"os"

	"github.com/detcoll/detcoll"
)

// nodeID names this rank's node: the launcher's node rank when one is set
// (DETCOLL_NODE_RANK, torchrun's GROUP_RANK, Slurm's SLURM_NODEID), else
// the host name. A launcher's node rank wins over the host name because
// two nodes may share one (containers, network namespaces).
func nodeID(getenv func(string) string) string {
	for _, k := range []string{"DETCOLL_NODE_RANK", "GROUP_RANK", "SLURM_NODEID"} {
		if v := getenv(k); v != "" {
			return "node " + v
		}
	}
	h, err := os.Hostname()
	if err != nil {
		h = "?"
	}
	return "host " + h
}

// CountNodes is the number of distinct nodes among the ranks of c
// (collective: every rank calls it and gets the same number).
func CountNodes(ctx context.Context, c *detcoll.Comm, getenv func(string) string) (int, error) {
	h := fnv.New64a()
	h.Write([]byte(nodeID(getenv)))
	mine := binary.LittleEndian.AppendUint64(nil, h.Sum64())
	all := make([]byte, 8*c.Size())
	if err := c.AllGather(ctx, mine, all, detcoll.Byte); err != nil {
		return 0, fmt.Errorf("bench: counting nodes: %w", err)
	}
	seen := map[uint64]bool{}
	for p := 0; p < c.Size(); p++ {
		seen[binary.LittleEndian.Uint64(all[8*p:])] = true
	}
	return len(seen), nil
}
