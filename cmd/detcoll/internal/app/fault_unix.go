//go:build unix

package app

import (
	"os"
	"syscall"
	"time"
)

// stopSelf stops this process (SIGSTOP), as `kill -STOP` would. The stop
// of a whole process lands asynchronously; the sleep keeps this goroutine
// from going on before it does.
func stopSelf() {
	syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	time.Sleep(200 * time.Millisecond)
}

// killSelf kills this process (SIGKILL), as `kill -9` would: no deferred
// call, no error line. The sleep keeps this goroutine from going on before
// the signal lands.
func killSelf() {
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
	time.Sleep(time.Hour)
}
