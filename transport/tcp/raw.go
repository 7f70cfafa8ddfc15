package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
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

// RawAllToAllThroughput measures plain TCP among the size ranks of a job,
// the ceiling for a collective whose ranks share the hosts and links: every
// rank connects to every other (no framing, no checksums), then all ranks at
// once write bytesPerPeer to every peer and read as much from each. It
// returns the bytes per second this rank received. Every rank of the job
// must call it with the same prefix, size and bytesPerPeer; host is the
// address to listen on and advertise (empty: as Options.Host).
//
// A collective's bus bandwidth (bytes each rank must receive ÷ time) is
// directly comparable with this figure, which, unlike
// RawLoopbackThroughput's single stream, includes the sharing of cores and
// links between the ranks.
func RawAllToAllThroughput(ctx context.Context, st Rendezvous, prefix string, rank, size, bytesPerPeer int, host string) (float64, error) {
	// Long on purpose: connect then measure in one sequence, as bench.RawAllToAll.
	if size < 2 || rank < 0 || rank >= size || bytesPerPeer <= 0 {
		return 0, fmt.Errorf("tcp: RawAllToAllThroughput: rank %d of %d, %d bytes per peer", rank, size, bytesPerPeer)
	}
	if host == "" {
		o, _ := Options{}.withDefaults()
		host = o.Host
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	key := func(kind string, r int) string { return fmt.Sprintf("%s/raw/%s/%d", prefix, kind, r) }
	if err := st.Set(ctx, key("addr", rank), []byte(ln.Addr().String())); err != nil {
		return 0, err
	}
	conns := make([]net.Conn, size)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	// Lower ranks accept, higher ranks dial and say who they are.
	acceptErr := make(chan error, 1)
	go func() {
		for i := rank + 1; i < size; i++ {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			var id [4]byte
			if _, err := io.ReadFull(c, id[:]); err != nil {
				c.Close()
				acceptErr <- err
				return
			}
			p := int(binary.LittleEndian.Uint32(id[:]))
			if p <= rank || p >= size || conns[p] != nil {
				c.Close()
				acceptErr <- fmt.Errorf("tcp: RawAllToAllThroughput: unexpected peer %d", p)
				return
			}
			conns[p] = c
		}
		acceptErr <- nil
	}()
	for p := 0; p < rank; p++ {
		addr, err := st.Get(ctx, key("addr", p))
		if err != nil {
			return 0, err
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", string(addr))
		if err != nil {
			return 0, err
		}
		conns[p] = c
		var id [4]byte
		binary.LittleEndian.PutUint32(id[:], uint32(rank))
		if _, err := c.Write(id[:]); err != nil {
			return 0, err
		}
	}
	if err := <-acceptErr; err != nil {
		return 0, err
	}
	// Everyone is connected before anyone starts the clock.
	if err := st.Set(ctx, key("ready", rank), []byte{1}); err != nil {
		return 0, err
	}
	for p := 0; p < size; p++ {
		if _, err := st.Get(ctx, key("ready", p)); err != nil {
			return 0, err
		}
	}
	const chunk = 1 << 20
	src := make([]byte, min(chunk, bytesPerPeer))
	var wg sync.WaitGroup
	errs := make(chan error, 2*size)
	start := time.Now()
	for p, c := range conns {
		if p == rank {
			continue
		}
		wg.Add(2)
		go func(c net.Conn) {
			defer wg.Done()
			for left := bytesPerPeer; left > 0; left -= len(src) {
				if _, err := c.Write(src[:min(len(src), left)]); err != nil {
					errs <- err
					return
				}
			}
		}(c)
		go func(c net.Conn) {
			defer wg.Done()
			buf := make([]byte, min(chunk, bytesPerPeer))
			for left := bytesPerPeer; left > 0; {
				n, err := c.Read(buf[:min(len(buf), left)])
				left -= n
				if err != nil && left > 0 {
					errs <- err
					return
				}
			}
		}(c)
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil {
		return 0, err
	}
	return float64((size-1)*bytesPerPeer) / elapsed.Seconds(), nil
}
