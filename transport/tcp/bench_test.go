package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/detcoll/detcoll/store"
)

// The benchmarks compare the framed transport with plain TCP over loopback
// moving the same bytes the same way, so the framing overhead (headers,
// CRC-32C on both sides, deadlines, locking) is the difference:
//
//	go test -run XXX -bench 'Stream|PingPong' -benchtime 2s ./transport/tcp/

var benchSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"1MiB", 1 << 20}, {"64MiB", 64 << 20}}

func benchPair(b *testing.B, opt Options) (*Transport, *Transport) {
	ts := connectGroup(b, store.NewMemory(), uniquePrefix("bench"), 2, opt)
	b.Cleanup(func() { closeAll(ts) })
	return ts[0], ts[1]
}

// rawPair is two ends of one loopback TCP connection.
func rawPair(b testing.TB) (*net.TCPConn, *net.TCPConn) {
	b.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := ln.AcceptTCP()
		acc <- c
	}()
	c1, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		b.Fatal(err)
	}
	c2 := <-acc
	if c2 == nil {
		b.Fatal("accept failed")
	}
	b.Cleanup(func() { c1.Close(); c2.Close() })
	return c1, c2
}

func streamFramed(b *testing.B, n int, opt Options) {
	a, c := benchPair(b, opt)
	src, dst := pattern(n, 1), make([]byte, n)
	ctx := context.Background()
	b.SetBytes(int64(n))
	b.ResetTimer()
	done := make(chan error, 1)
	go func() {
		for range b.N {
			if err := c.Recv(ctx, 0, tg(1), dst); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range b.N {
		if err := a.Send(ctx, 1, tg(1), src); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func BenchmarkStream(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) { streamFramed(b, s.n, Options{}) })
	}
}

func BenchmarkRawStream(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			w, r := rawPair(b)
			src, dst := pattern(s.n, 1), make([]byte, s.n)
			b.SetBytes(int64(s.n))
			b.ResetTimer()
			done := make(chan error, 1)
			go func() {
				for range b.N {
					if _, err := io.ReadFull(r, dst); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for range b.N {
				if _, err := w.Write(src); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkPingPong: rank 0 sends n bytes, rank 1 sends them back; the
// reported throughput counts both directions (2n per round trip).
func BenchmarkPingPong(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) { pingPongFramed(b, s.n, Options{}) })
	}
}

func pingPongFramed(b *testing.B, n int, opt Options) {
	a, c := benchPair(b, opt)
	ping, pong := pattern(n, 1), make([]byte, n)
	ctx := context.Background()
	b.SetBytes(2 * int64(n))
	b.ResetTimer()
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, n)
		for range b.N {
			if err := c.Recv(ctx, 0, tg(1), buf); err != nil {
				done <- err
				return
			}
			if err := c.Send(ctx, 0, tg(2), buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range b.N {
		if err := a.Send(ctx, 1, tg(1), ping); err != nil {
			b.Fatal(err)
		}
		if err := a.Recv(ctx, 1, tg(2), pong); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func BenchmarkRawPingPong(b *testing.B) {
	for _, s := range benchSizes {
		b.Run(s.name, func(b *testing.B) {
			x, y := rawPair(b)
			ping, pong := pattern(s.n, 1), make([]byte, s.n)
			b.SetBytes(2 * int64(s.n))
			b.ResetTimer()
			done := make(chan error, 1)
			go func() {
				buf := make([]byte, s.n)
				for range b.N {
					if _, err := io.ReadFull(y, buf); err != nil {
						done <- err
						return
					}
					if _, err := y.Write(buf); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			for range b.N {
				if _, err := x.Write(ping); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(x, pong); err != nil {
					b.Fatal(err)
				}
			}
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkChunkSize is the measurement behind DefaultChunkSize: one
// checksum per frame against per-chunk checksums of several sizes.
func BenchmarkChunkSize(b *testing.B) {
	for _, chunk := range []int{-1, 128 << 10, 256 << 10, 512 << 10, 1 << 20, 2 << 20} {
		name := "single"
		if chunk > 0 {
			name = fmt.Sprintf("%dKiB", chunk>>10)
		}
		for _, s := range benchSizes[1:] {
			b.Run("Stream/"+name+"/"+s.name, func(b *testing.B) { streamFramed(b, s.n, Options{ChunkSize: chunk}) })
			b.Run("PingPong/"+name+"/"+s.name, func(b *testing.B) { pingPongFramed(b, s.n, Options{ChunkSize: chunk}) })
		}
	}
}

func TestRawLoopbackThroughput(t *testing.T) {
	bps, err := RawLoopbackThroughput(1<<20, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if bps <= 0 {
		t.Fatalf("throughput %v", bps)
	}
	t.Logf("raw loopback: %.2f GB/s", bps/1e9)
	if _, err := RawLoopbackThroughput(0, time.Millisecond); err == nil {
		t.Fatal("size 0 accepted")
	}
}

// BenchmarkSenderChecksum compares the sender's checksum helper goroutine
// (parallelCRC) with checksumming inline before each chunk's write.
func BenchmarkSenderChecksum(b *testing.B) {
	for _, par := range []bool{false, true} {
		name := "inline"
		if par {
			name = "helper"
		}
		b.Run("Stream/"+name+"/64MiB", func(b *testing.B) {
			parallelCRC = par
			defer func() { parallelCRC = true }()
			streamFramed(b, 64<<20, Options{})
		})
		b.Run("PingPong/"+name+"/64MiB", func(b *testing.B) {
			parallelCRC = par
			defer func() { parallelCRC = true }()
			pingPongFramed(b, 64<<20, Options{})
		})
	}
}
