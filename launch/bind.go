package launch

import (
	"fmt"
	"os/exec"
	"strings"
)

// Binding is how the launcher binds its workers to this node's CPUs (the
// CPUs the launcher itself may run on).
type Binding string

const (
	// BindAuto (also "") binds as BindCore when the node's workers
	// outnumber its CPUs, and does not bind otherwise. Oversubscribed
	// workers that sleep and wake in turn leave the kernel's load balancer
	// a misleading picture: it kept three of four on one core for whole
	// runs. Bound round robin, W = 4 on 2 cores took 0.44–0.81× the time
	// in most shared-memory rows; at W = 2 on 2 cores binding was mixed
	// (AllGather 16 MiB 1.44×, AllReduce 16 MiB 0.80×), so a group that
	// fits is left alone (docs/launcher.md, "CPU binding").
	BindAuto Binding = "auto"
	// BindNone leaves placement to the kernel, as torchrun does.
	BindNone Binding = "none"
	// BindCore gives each worker its own share of the CPUs: local rank l of
	// P workers on n CPUs gets CPUs l·n/P … (l+1)·n/P − 1 when P ≤ n, and
	// CPU l mod n when P > n (Open MPI's --bind-to core; oversubscribed,
	// round robin).
	BindCore Binding = "core"
)

// EnvBindTo supplies --bind-to.
const EnvBindTo = "DETCOLL_BIND_TO"

// EnvNodeCPUs tells a bound worker how many CPUs the node's workers share
// (transport/shm's EnvNodeCPUs: whether a group fits its CPUs decides how
// its ranks wait), since its own affinity shows only its share.
const EnvNodeCPUs = "DETCOLL_NODE_CPUS"

// parseBinding reads a --bind-to value.
func parseBinding(v string) (Binding, error) {
	switch b := Binding(strings.ToLower(strings.TrimSpace(v))); b {
	case "", BindAuto:
		return BindAuto, nil
	case BindNone, BindCore:
		return b, nil
	}
	return "", fmt.Errorf("%q is not auto, none or core", v)
}

func validBinding(b Binding) bool {
	_, err := parseBinding(string(b))
	return err == nil
}

// binds reports whether b binds nproc workers on a node whose launcher may
// run on cpus CPUs.
func (b Binding) binds(nproc, cpus int) bool {
	switch b, _ = parseBinding(string(b)); b {
	case BindCore:
		return cpus > 0
	case BindNone:
		return false
	}
	return cpus > 0 && nproc > cpus
}

// workerCPUs is the CPUs that local rank local of nproc workers is bound to
// under BindCore, from allowed (the launcher's CPUs, ascending).
func workerCPUs(allowed []int, nproc, local int) []int {
	n := len(allowed)
	if nproc >= n {
		return allowed[local%n : local%n+1]
	}
	return allowed[local*n/nproc : (local+1)*n/nproc]
}

// bindPlan is the CPUs this attempt's workers are bound among (the
// launcher's, ascending), or nil when they are not bound.
func (j *job) bindPlan() ([]int, error) {
	b, _ := parseBinding(string(j.cfg.BindTo))
	allowed, err := allowedCPUs()
	switch {
	case err != nil && b == BindCore:
		return nil, fmt.Errorf("--bind-to core: %w", err)
	case err != nil || !b.binds(j.cfg.NprocPerNode, len(allowed)):
		return nil, nil
	}
	return allowed, nil
}

// startCmd starts cmd, bound to local rank local's CPUs when the attempt
// binds (j.cpus). The calling goroutine is locked to its thread
// (startPinned): the worker inherits the thread's mask, which is then put
// back.
func (j *job) startCmd(cmd *exec.Cmd, local int) error {
	if j.cpus == nil {
		return cmd.Start()
	}
	restore, err := bindThread(workerCPUs(j.cpus, j.cfg.NprocPerNode, local))
	if err != nil {
		return err
	}
	err = cmd.Start()
	if !restore() {
		j.boundThread = true
	}
	return err
}
