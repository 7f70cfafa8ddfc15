//go:build unix && !linux

package launch

import "syscall"

func setPdeathsig(*syscall.SysProcAttr) {}

func processStopped(int) bool { return false }
