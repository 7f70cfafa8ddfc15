package tcp

import (
	"errors"
	"io"
	"net"
	"time"
)

// RawLoopbackThroughput measures plain TCP over the loopback interface, the
// ceiling for this transport on one host: one connection, one goroutine
// writing size-byte messages for about d, another reading them into one
// buffer. It returns the bytes per second the reader saw. Reports print it
// next to collective bandwidth so the framing overhead is visible.
func RawLoopbackThroughput(size int, d time.Duration) (bytesPerSec float64, err error) {
	if size <= 0 {
		return 0, errors.New("tcp: RawLoopbackThroughput: size must be positive")
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	type result struct {
		n   int64
		dur time.Duration
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := ln.AcceptTCP()
		if err != nil {
			res <- result{err: err}
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		var n int64
		var start, end time.Time
		for i := 0; ; i++ {
			if _, err := io.ReadFull(c, buf); err != nil {
				if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
					err = nil
				}
				res <- result{n: n, dur: end.Sub(start), err: err}
				return
			}
			// The clock starts when the first message is in: connection
			// set-up and slow start are not part of the figure.
			if i == 0 {
				start = time.Now()
			} else {
				n += int64(size)
			}
			end = time.Now()
		}
	}()
	c, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		ln.Close()
		<-res
		return 0, err
	}
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	deadline := time.Now().Add(d)
	var werr error
	for k := 0; k < 3 || time.Now().Before(deadline); k++ {
		if _, werr = c.Write(buf); werr != nil {
			break
		}
	}
	c.Close()
	r := <-res
	if werr != nil {
		return 0, werr
	}
	if r.err != nil {
		return 0, r.err
	}
	if r.dur <= 0 || r.n == 0 {
		return 0, errors.New("tcp: RawLoopbackThroughput: nothing measured")
	}
	return float64(r.n) / r.dur.Seconds(), nil
}
