//go:build unix

package app

import (
	"os"
	"syscall"
)

// stopSelf stops this process (SIGSTOP), as `kill -STOP` would.
func stopSelf() { syscall.Kill(os.Getpid(), syscall.SIGSTOP) }
