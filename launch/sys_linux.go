package launch

import (
	"syscall"

	"github.com/detcoll/detcoll/internal/procstat"
)

// setPdeathsig makes the kernel SIGKILL a worker whose launcher dies without
// stopping it. The signal fires when the thread that started the worker
// exits, which is why Run starts workers from a locked OS thread that lives
// as long as Run.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// processStopped reports whether pid is stopped (state T or t in
// /proc/PID/stat: SIGSTOP, SIGTSTP, a tracer).
func processStopped(pid int) bool {
	state, _, err := procstat.Stat(pid)
	return err == nil && (state == 'T' || state == 't')
}
