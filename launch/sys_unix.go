//go:build unix

package launch

import (
	"errors"
	"os"
	"syscall"
)

// sysProcAttr puts a worker in its own process group, so that signals sent
// to the group reach the worker's children too.
func sysProcAttr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(a)
	return a
}

// signalGroup sends sig to the process group led by p. A group that no
// longer exists is not an error.
func signalGroup(p *os.Process, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return p.Signal(sig)
	}
	if err := syscall.Kill(-p.Pid, s); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

var (
	sigTerm os.Signal = syscall.SIGTERM
	sigKill os.Signal = syscall.SIGKILL
	sigCont os.Signal = syscall.SIGCONT
)
