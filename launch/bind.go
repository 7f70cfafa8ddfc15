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
	// one CPU when P > n: the one least used by the workers of other jobs
	// bound on this host, ties to the lower CPU, so a job alone is bound
	// round robin (Open MPI's --bind-to core with oversubscription).
	BindCore Binding = "core"
)

// EnvBindTo supplies --bind-to.
const EnvBindTo = "DETCOLL_BIND_TO"

// EnvNodeCPUs tells a bound worker how many CPUs the node's workers share
// (transport/shm's EnvNodeCPUs: whether a group fits its CPUs decides how
// its ranks wait), since its own affinity shows only its share.
const EnvNodeCPUs = "DETCOLL_NODE_CPUS"

// ParseBinding reads a --bind-to value (DETCOLL_BIND_TO): auto (or empty),
// none or core, in any case.
func ParseBinding(v string) (Binding, error) {
	switch b := Binding(strings.ToLower(strings.TrimSpace(v))); b {
	case "", BindAuto:
		return BindAuto, nil
	case BindNone, BindCore:
		return b, nil
	}
	return "", fmt.Errorf("%q is not auto, none or core", v)
}

func validBinding(b Binding) bool {
	_, err := ParseBinding(string(b))
	return err == nil
}

// binds reports whether b binds nproc workers on a node whose launcher may
// run on cpus CPUs.
func (b Binding) binds(nproc, cpus int) bool {
	switch b, _ = ParseBinding(string(b)); b {
	case BindCore:
		return cpus > 0
	case BindNone:
		return false
	}
	return cpus > 0 && nproc > cpus
}

// workerCPUs is the CPUs that local rank local of nproc workers gets from
// allowed (the launcher's CPUs, ascending): a block when they fit, one CPU
// round robin when they outnumber them (a job alone; claims spread jobs
// side by side).
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
	b, _ := ParseBinding(string(j.cfg.BindTo))
	allowed, err := allowedCPUs()
	switch {
	case err != nil && b == BindCore:
		return nil, fmt.Errorf("--bind-to core: %w", err)
	case err != nil || !b.binds(j.cfg.NprocPerNode, len(allowed)):
		return nil, nil
	}
	return allowed, nil
}

// assignCPUs sets j.assign, each local rank's CPUs among j.cpus: blocks
// when the workers fit (workerCPUs), and one CPU each, the least claimed by
// other jobs on this host first (claims_linux.go), when they outnumber the
// CPUs.
func (j *job) assignCPUs() {
	nproc := j.cfg.NprocPerNode
	j.assign = make([][]int, nproc)
	if nproc <= len(j.cpus) {
		for l := range nproc {
			j.assign[l] = workerCPUs(j.cpus, nproc, l)
		}
		return
	}
	if j.claims == nil {
		j.claims = newClaimer()
	}
	for l, c := range j.claims.claim(j.cpus, nproc) {
		j.assign[l] = []int{c}
	}
}

// releaseCPUs gives back the job's CPU claims.
func (j *job) releaseCPUs() {
	if j.claims != nil {
		j.claims.release()
	}
}

// startCmd starts cmd, bound to local rank local's CPUs when the attempt
// binds (j.cpus). The calling goroutine is locked to its thread
// (startPinned): the worker inherits the thread's mask, which is then put
// back.
func (j *job) startCmd(cmd *exec.Cmd, local int) error {
	if j.cpus == nil {
		return cmd.Start()
	}
	restore, err := bindThread(j.assign[local])
	if err != nil {
		return err
	}
	err = cmd.Start()
	if !restore() {
		j.boundThread = true
	}
	return err
}
