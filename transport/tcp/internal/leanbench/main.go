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
	// Long on purpose: an internal benchmark's flags, setup, loop and report, in order.
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
	var st store.Store
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
	st = cl
	t, err := tcp.Connect(ctx, st, *prefix, *rank, *w, tcp.Options{})
	if err != nil {
		die(err)
	}
	c, err := detcoll.New(t)
	if err != nil {
		die(err)
	}
	send := make([]byte, *size)
	recv := make([]byte, *size)
	bufs := make([][]byte, *w)
	for i := range bufs {
		bufs[i] = make([]byte, *size)
	}
	var seq uint64
	one := func() {
		switch *mode {
		case "comm":
			if err := c.AllReduce(context.Background(), send, recv, detcoll.FP32); err != nil {
				die(err)
			}
		case "seq", "seqdl":
			// No goroutines: send to every peer, then receive from every
			// peer (small frames fit in the socket buffers, so sends do
			// not wait for the peer).
			cx := context.Background()
			var cc context.CancelFunc
			if *mode == "seqdl" {
				cx, cc = context.WithTimeout(cx, time.Minute)
			}
			seq++
			tg := transport.Tag{Phase: 2, Seq: seq}
			for p := 0; p < *w; p++ {
				if p != *rank {
					if err := t.Send(cx, p, tg, send); err != nil {
						die(err)
					}
				}
			}
			for p := 0; p < *w; p++ {
				if p != *rank {
					if err := t.Recv(cx, p, tg, bufs[p]); err != nil {
						die(err)
					}
				}
			}
			if cc != nil {
				cc()
			}
		case "tcpx", "tcpxdl":
			cx := context.Background()
			var cc context.CancelFunc
			if *mode == "tcpxdl" {
				cx, cc = context.WithTimeout(cx, time.Minute)
			}
			seq++
			tg := transport.Tag{Phase: 2, Seq: seq}
			if exchangeFn == nil {
				die(fmt.Errorf("mode %s: built with -tags noexchange", *mode))
			}
			exchangeFn(t, cx, tg, func(int) ([]byte, bool) { return send, true },
				func(p int) ([]byte, bool) { return bufs[p], true },
				func(err error) { die(err) })
			if cc != nil {
				cc()
			}
		case "xchg", "xchgdl":
			cx := context.Background()
			var cc context.CancelFunc
			if *mode == "xchgdl" {
				cx, cc = context.WithTimeout(cx, time.Minute)
			}
			seq++
			tg := transport.Tag{Phase: 2, Seq: seq}
			var wg sync.WaitGroup
			for p := 0; p < *w; p++ {
				if p == *rank {
					continue
				}
				wg.Add(2)
				go func() { defer wg.Done(); t.Send(cx, p, tg, send) }()
				go func() { defer wg.Done(); t.Recv(cx, p, tg, bufs[p]) }()
			}
			wg.Wait()
			if cc != nil {
				cc()
			}
		}
	}
	for range *iters / 5 {
		one()
	}
	if *prof != "" {
		f, _ := os.Create(fmt.Sprintf("%s.%d", *prof, *rank))
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	var ts []float64
	for range *samples {
		c.Barrier(ctx)
		t0 := time.Now()
		for range *iters {
			one()
		}
		ts = append(ts, float64(time.Since(t0).Microseconds())/float64(*iters))
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := float64((ru1.Utime.Nano()+ru1.Stime.Nano())-(ru0.Utime.Nano()+ru0.Stime.Nano())) / 1e3 / float64(*samples**iters)
	c.Barrier(ctx)
	sorted := slices.Clone(ts)
	slices.Sort(sorted)
	if *rank == 0 {
		fmt.Printf("mode=%s W=%d bytes=%d median_us=%.1f min_us=%.1f max_us=%.1f cpu_us_per_op_rank0=%.1f samples=%v\n", *mode, *w, *size, sorted[len(sorted)/2], sorted[0], sorted[len(sorted)-1], cpu, ts)
	}
	c.Close()
	cl.Close()
}
