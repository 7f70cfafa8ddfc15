package launch

import "syscall"

// setPdeathsig makes the kernel SIGKILL a worker whose launcher dies without
// stopping it. The signal fires when the thread that started the worker
// exits, which is why Run starts workers from a locked OS thread that lives
// as long as Run.
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
