//go:build !unix

package launch

import (
	"os"
	"syscall"
)

// Without process groups, signals reach the worker process only, and only
// os.Kill can be delivered.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func signalGroup(p *os.Process, sig os.Signal) error {
	if err := p.Signal(sig); err != nil && err != os.ErrProcessDone {
		return p.Kill()
	}
	return nil
}

var (
	sigTerm os.Signal = os.Kill
	sigKill os.Signal = os.Kill
	sigCont os.Signal // none
)

func processStopped(int) bool { return false }
