package launch

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ParseNproc reads --nproc-per-node: a positive integer, or torchrun's
// gpu (the GPUs visible here; an error if none), cpu (runtime.NumCPU) or
// auto (gpu if any, else cpu).
func ParseNproc(s string) (int, error) {
	switch s {
	case "cpu":
		return runtime.NumCPU(), nil
	case "gpu":
		n := countGPUs()
		if n == 0 {
			return 0, errors.New("gpu: no GPU is visible on this host (no /proc/driver/nvidia/gpus entry or /dev/kfd GPU node, or CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES empty)")
		}
		return n, nil
	case "auto":
		if n := countGPUs(); n > 0 {
			return n, nil
		}
		return runtime.NumCPU(), nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a positive integer, gpu, cpu or auto", s)
	}
	if n < 1 {
		return 0, fmt.Errorf("%d: need at least one worker per node", n)
	}
	return n, nil
}

// countGPUs counts the GPUs a worker could use: NVIDIA ones from the
// driver's /proc entries, AMD ones from the KFD topology, each narrowed by
// the runtime's visibility variable when set.
func countGPUs() int {
	visible := func(n int, vars ...string) int {
		for _, v := range vars {
			if s, ok := os.LookupEnv(v); ok {
				if strings.TrimSpace(s) == "" || s == "-1" || s == "none" {
					return 0
				}
				return min(n, len(strings.Split(s, ",")))
			}
		}
		return n
	}
	nv, _ := filepath.Glob("/proc/driver/nvidia/gpus/*")
	amd := 0
	nodes, _ := filepath.Glob("/sys/class/kfd/kfd/topology/nodes/*/gpu_id")
	for _, p := range nodes {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) != "0" {
			amd++
		}
	}
	return visible(len(nv), "CUDA_VISIBLE_DEVICES") + visible(amd, "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
}

// ParseNnodes reads --nnodes: N, or torchrun's elastic MIN:MAX (1 ≤ MIN ≤
// MAX). It returns MIN and MAX, both N for a single number. With MIN < MAX
// the rendezvous admits nodes until MAX have joined or, once MIN have, until
// the last call ends (RdzvConf.LastCallTimeout).
func ParseNnodes(s string) (lo, hi int, err error) {
	a, b, isRange := strings.Cut(s, ":")
	if lo, err = intValue(a, 1); err != nil {
		return 0, 0, err
	}
	if !isRange {
		return lo, lo, nil
	}
	if hi, err = intValue(b, 1); err != nil {
		return 0, 0, err
	}
	if lo > hi {
		return 0, 0, fmt.Errorf("elastic range %d:%d has MIN above MAX", lo, hi)
	}
	return lo, hi, nil
}

// rdzvConfIgnored are torchrun's --rdzv-conf keys that detcoll accepts and
// ignores (they tune torchrun's own rendezvous store).
var rdzvConfIgnored = []string{"read_timeout", "close_timeout", "keep_alive_interval",
	"keep_alive_max_attempt", "heartbeat_timeout", "is_host", "store_type", "use_libuv", "local_addr"}

// RdzvConf is what detcoll takes from --rdzv-conf; zero fields were not
// given.
type RdzvConf struct {
	// JoinTimeout is timeout= or join_timeout= (Config.RdzvTimeout).
	JoinTimeout time.Duration
	// LastCallTimeout is last_call_timeout= (Config.LastCallTimeout).
	LastCallTimeout time.Duration
}

// ParseRdzvConf reads --rdzv-conf "k=v,k=v" (values in seconds or as Go
// durations). torchrun's keys that detcoll has no use for are accepted and
// ignored; unknown keys are errors.
func ParseRdzvConf(s string) (RdzvConf, error) {
	var rc RdzvConf
	for _, kv := range strings.Split(s, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return RdzvConf{}, fmt.Errorf("%q is not key=value", kv)
		}
		k = strings.TrimSpace(k)
		var dst *time.Duration
		switch {
		case k == "timeout" || k == "join_timeout":
			dst = &rc.JoinTimeout
		case k == "last_call_timeout":
			dst = &rc.LastCallTimeout
		case slices.Contains(rdzvConfIgnored, k):
			continue
		default:
			return RdzvConf{}, fmt.Errorf("unknown key %q (known: timeout, join_timeout, last_call_timeout, %s)", k, strings.Join(rdzvConfIgnored, ", "))
		}
		d, err := parsePositiveDuration(v)
		if err != nil {
			return RdzvConf{}, fmt.Errorf("%s: %v", k, err)
		}
		*dst = d
	}
	return rc, nil
}

// parsePositiveDuration reads a Go duration or a number of seconds > 0.
func parsePositiveDuration(s string) (time.Duration, error) {
	d, err := parseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, err
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q is not a positive duration", s)
	}
	return d, nil
}

// Streams says which of a worker's streams go to log files, per local
// rank. All applies to ranks not in PerRank.
type Streams struct {
	All     Std
	PerRank map[int]Std
}

// Std is a set of standard streams, torchrun's 0-3.
type Std uint8

// The streams.
const (
	StdNone Std = 0
	StdOut  Std = 1
	StdErr  Std = 2
	StdBoth Std = 3
)

// For is the set that applies to local rank lr.
func (s Streams) For(lr int) Std {
	if v, ok := s.PerRank[lr]; ok {
		return v
	}
	return s.All
}

// ParseStreams reads torchrun's --redirects/--tee value: "3" or "0:1,1:2".
func ParseStreams(s string) (Streams, error) {
	var out Streams
	s = strings.TrimSpace(s)
	if s == "" {
		return out, nil
	}
	std := func(v string) (Std, error) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n > 3 {
			return 0, fmt.Errorf("%q is not 0 (none), 1 (stdout), 2 (stderr) or 3 (both)", v)
		}
		return Std(n), nil
	}
	if !strings.Contains(s, ":") {
		v, err := std(s)
		out.All = v
		return out, err
	}
	out.PerRank = map[int]Std{}
	for _, item := range strings.Split(s, ",") {
		r, v, ok := strings.Cut(item, ":")
		if !ok {
			return Streams{}, fmt.Errorf("%q is not LOCAL_RANK:STREAMS", item)
		}
		lr, err := intValue(r, 0)
		if err != nil {
			return Streams{}, fmt.Errorf("local rank %v", err)
		}
		if out.PerRank[lr], err = std(v); err != nil {
			return Streams{}, err
		}
	}
	return out, nil
}

func parseRankList(s string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(s, ",") {
		n, err := intValue(item, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	sort.Ints(out)
	return slices.Compact(out), nil
}
