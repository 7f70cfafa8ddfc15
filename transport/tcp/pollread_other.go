//go:build !linux

package tcp

import (
	"io"
	"net"
	"time"
)

// newPollReader polls only on Linux (sched_yield between attempts); other
// systems read the connection directly.
func newPollReader(c *net.TCPConn, _ time.Duration) io.Reader { return c }

// pollReader does not exist here; the type keeps the receiving direction's
// field.
type pollReader struct {
	beforePark func()
	nonblock   bool
	budget     time.Duration
}

func (*pollReader) Read([]byte) (int, error) { return 0, io.EOF }

// yieldCPU is never called here: the progress loop needs a polling reader.
func yieldCPU() {}
