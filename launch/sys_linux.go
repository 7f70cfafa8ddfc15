package launch

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// setPdeathsig makes the kernel SIGKILL a worker whose launcher dies without
// stopping it. The signal fires when the thread that started the worker
// exits, which is why Run starts workers from a locked OS thread that lives
// as long as Run.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }

// processStopped reports whether pid is stopped (state T or t in
// /proc/PID/stat: SIGSTOP, SIGTSTP, a tracer).
func processStopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) state …; comm may contain spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return false
	}
	return b[i+2] == 'T' || b[i+2] == 't'
}
