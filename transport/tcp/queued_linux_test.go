package tcp

import (
	"net"

	"golang.org/x/sys/unix"
)

// queuedIn returns how many bytes wait unread in c's receive queue (SIOCINQ).
func queuedIn(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil {
		return 0, err
	}
	return n, ierr
}
