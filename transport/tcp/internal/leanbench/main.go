//go:build unix

// Command leanbench times one rank of a W-rank job over detcoll's TCP
// transport on loopback (start one process per rank; rank 0 serves the
// store): mode comm is Comm.AllReduce fp32; the others are one exchange
// step with every peer done three ways, with a Background context or
// (suffix dl) one with a deadline like the communicator's: xchg a goroutine
// per Send and Recv (what the root package's exchange does), tcpx
// tcp.Transport.Exchange, seq every Send then every Recv on one goroutine
// (a floor: no hand-offs). It prints rank 0's median, spread and CPU time
// per operation, and writes CPU profiles with -prof. Build with -tags
// noexchange against a tree without tcp.Transport.Exchange.
// docs/benchmarks/tcp-lean-run.sh runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/transport/tcp"
)

func die(err error) {
	fmt.Fprintln(os.Stderr, "leanbench:", err)
	os.Exit(1)
}

// exchangeFn is tcp.Transport.Exchange where the tree has it (exchange.go).
var exchangeFn func(t *tcp.Transport, ctx context.Context, tg transport.Tag, s, r func(int) ([]byte, bool), rep func(error))

func main() {
	rank := flag.Int("rank", 0, "")
	w := flag.Int("w", 2, "")
	addr := flag.String("store", "127.0.0.1:29777", "")
	mode := flag.String("mode", "comm", "comm | xchg | xchgdl")
	size := flag.Int("bytes", 4096, "")
	iters := flag.Int("iters", 2000, "")
	samples := flag.Int("samples", 7, "")
	prof := flag.String("prof", "", "")
	prefix := flag.String("prefix", "lean", "")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if *rank == 0 {
		srv, err := store.Listen(*addr, "")
		if err != nil {
			die(err)
		}
		defer srv.Close()
	}
	cl, err := store.Dial(ctx, *addr, "")
	if err != nil {
		die(err)
	}
	var st store.Store = cl
	t, err := tcp.Connect(ctx, st, *prefix, *rank, *w, tcp.Options{})
	if err != nil {
		die(err)
	}
	c, err := detcoll.New(t)
	if err != nil {
		die(err)
	}
	b := newBench(*mode, *rank, *w, *size, t, c)
	for range *iters / 5 {
		b.one()
	}
	if *prof != "" {
		f, _ := os.Create(fmt.Sprintf("%s.%d", *prof, *rank))
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	ts, cpu := b.timeSamples(ctx, *samples, *iters)
	c.Barrier(ctx)
	sorted := slices.Clone(ts)
	slices.Sort(sorted)
	if *rank == 0 {
		fmt.Printf("mode=%s W=%d bytes=%d median_us=%.1f min_us=%.1f max_us=%.1f cpu_us_per_op_rank0=%.1f samples=%v\n", *mode, *w, *size, sorted[len(sorted)/2], sorted[0], sorted[len(sorted)-1], cpu, ts)
	}
	c.Close()
	cl.Close()
}

// bench is one rank's operation under test and its buffers.
type bench struct {
	mode    string
	rank, w int
	t       *tcp.Transport
	c       *detcoll.Comm
	send    []byte
	recv    []byte
	bufs    [][]byte // by peer: what the exchange modes receive
	seq     uint64   // the last exchange's tag sequence number
}

func newBench(mode string, rank, w, size int, t *tcp.Transport, c *detcoll.Comm) *bench {
	b := &bench{mode: mode, rank: rank, w: w, t: t, c: c, send: make([]byte, size), recv: make([]byte, size), bufs: make([][]byte, w)}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, size)
	}
	return b
}

// timeSamples runs samples samples of iters operations, each after a
// barrier, and returns each sample's microseconds per operation and this
// process's CPU microseconds per operation over all of them.
func (b *bench) timeSamples(ctx context.Context, samples, iters int) ([]float64, float64) {
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	var ts []float64
	for range samples {
		b.c.Barrier(ctx)
		t0 := time.Now()
		for range iters {
			b.one()
		}
		ts = append(ts, float64(time.Since(t0).Microseconds())/float64(iters))
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := float64((ru1.Utime.Nano()+ru1.Stime.Nano())-(ru0.Utime.Nano()+ru0.Stime.Nano())) / 1e3 / float64(samples*iters)
	return ts, cpu
}

// one runs the mode's operation once; it exits the process on a failure.
func (b *bench) one() {
	switch b.mode {
	case "comm":
		if err := b.c.AllReduce(context.Background(), b.send, b.recv, detcoll.FP32); err != nil {
			die(err)
		}
	case "seq", "seqdl":
		cx, cc := b.opContext("seqdl")
		b.sequential(cx, b.nextTag())
		cc()
	case "tcpx", "tcpxdl":
		cx, cc := b.opContext("tcpxdl")
		b.tcpExchange(cx, b.nextTag())
		cc()
	case "xchg", "xchgdl":
		cx, cc := b.opContext("xchgdl")
		b.goroutineExchange(cx, b.nextTag())
		cc()
	}
}

// opContext is the context of one exchange: Background, or in the mode
// withDeadline one with a deadline like the communicator's.
func (b *bench) opContext(withDeadline string) (context.Context, context.CancelFunc) {
	if b.mode == withDeadline {
		return context.WithTimeout(context.Background(), time.Minute)
	}
	return context.Background(), func() {}
}

// nextTag is the tag of the next exchange.
func (b *bench) nextTag() transport.Tag {
	b.seq++
	return transport.Tag{Phase: 2, Seq: b.seq}
}

// sequential uses no goroutines: it sends to every peer, then receives from
// every peer (small frames fit in the socket buffers, so sends do not wait
// for the peer).
func (b *bench) sequential(cx context.Context, tg transport.Tag) {
	for p := 0; p < b.w; p++ {
		if p != b.rank {
			if err := b.t.Send(cx, p, tg, b.send); err != nil {
				die(err)
			}
		}
	}
	for p := 0; p < b.w; p++ {
		if p != b.rank {
			if err := b.t.Recv(cx, p, tg, b.bufs[p]); err != nil {
				die(err)
			}
		}
	}
}

// tcpExchange is one tcp.Transport.Exchange with every peer.
func (b *bench) tcpExchange(cx context.Context, tg transport.Tag) {
	if exchangeFn == nil {
		die(fmt.Errorf("mode %s: built with -tags noexchange", b.mode))
	}
	exchangeFn(b.t, cx, tg, func(int) ([]byte, bool) { return b.send, true },
		func(p int) ([]byte, bool) { return b.bufs[p], true },
		func(err error) { die(err) })
}

// goroutineExchange runs a goroutine per Send and Recv, as the root
// package's exchange does.
func (b *bench) goroutineExchange(cx context.Context, tg transport.Tag) {
	var wg sync.WaitGroup
	for p := 0; p < b.w; p++ {
		if p == b.rank {
			continue
		}
		wg.Add(2)
		go func() { defer wg.Done(); b.t.Send(cx, p, tg, b.send) }()
		go func() { defer wg.Done(); b.t.Recv(cx, p, tg, b.bufs[p]) }()
	}
	wg.Wait()
}
