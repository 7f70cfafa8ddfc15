package devcomm

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/gpu/devrt"
)

// Peer death as a process exit on the NCCL path, on the host: the peer is a
// real process (this test binary, re-executed) that completes collectives
// by writing a byte per collective to a pipe, as NCCL's transport would
// deliver the peer's data; the surviving rank's stand-in runtime completes
// its stream on that byte. The peer exits in the middle of its second
// collective. With a transport that notices the closed connection (NCCL's
// socket or IB transports report ncclRemoteError through
// ncclCommGetAsyncError), the survivor fails with that error at once; with
// one that does not (NVLink: NCCL's kernel just spins), it fails with
// ErrWaitTimeout at the wait bound. Either way within the bound, poisoned,
// and Close returns.

const peerEnv = "DETCOLL_DEVCOMM_TEST_PEER"

// peerMain is the peer process (TestMain runs it when peerEnv is set): it
// completes one collective, then dies in the next.
func peerMain() {
	os.Stdout.Write([]byte{1})
	time.Sleep(20 * time.Millisecond)
	os.Exit(3)
}

// pipePeer is the surviving rank's view of the peer process.
type pipePeer struct {
	mu     sync.Mutex
	got    int   // collectives the peer completed
	closed error // set when the pipe hit EOF: the peer's process is gone
}

func startPeer(t *testing.T) (*pipePeer, *exec.Cmd) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), peerEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &pipePeer{}
	go func() {
		r := bufio.NewReader(out)
		for {
			if _, err := r.ReadByte(); err != nil {
				p.mu.Lock()
				p.closed = fmt.Errorf("ncclRemoteError: the peer's connection closed (%v)", err)
				if err == io.EOF {
					p.closed = errors.New("ncclRemoteError: the peer's process exited")
				}
				p.mu.Unlock()
				return
			}
			p.mu.Lock()
			p.got++
			p.mu.Unlock()
		}
	}()
	return p, cmd
}

// peerRT completes stream 11 while the peer has completed at least want
// collectives.
type peerRT struct {
	*fakeRT
	peer *pipePeer
	want int
}

func (r *peerRT) StreamQuery(s devrt.Stream) (bool, error) {
	r.peer.mu.Lock()
	defer r.peer.mu.Unlock()
	return r.peer.got >= r.want, nil
}

func TestPeerProcessExitNCCLPath(t *testing.T) {
	for _, detects := range []bool{true, false} {
		t.Run(fmt.Sprintf("transport-detects=%v", detects), func(t *testing.T) {
			peer, cmd := startPeer(t)
			defer cmd.Wait()
			c, frt := fakeComm(t, 2*time.Second)
			c.rt = &peerRT{fakeRT: frt, peer: peer, want: 1}
			if detects {
				c.asyncErrHook = func() error {
					peer.mu.Lock()
					defer peer.mu.Unlock()
					return peer.closed
				}
			}
			// Collective 1: the peer completes it.
			if err := c.Synchronize(); err != nil {
				t.Fatalf("the first collective: %v", err)
			}
			// Collective 2: the peer's process exits in the middle of it.
			c.rt.(*peerRT).want = 2
			start := time.Now()
			err := c.Synchronize()
			took := time.Since(start)
			switch {
			case detects && (err == nil || errors.Is(err, ErrWaitTimeout)):
				t.Fatalf("Synchronize = %v, want the transport's error", err)
			case !detects && !errors.Is(err, ErrWaitTimeout):
				t.Fatalf("Synchronize = %v, want ErrWaitTimeout", err)
			case took > 4*time.Second:
				t.Fatalf("the survivor failed after %v with a 2s bound", took)
			}
			if c.Err() == nil {
				t.Fatal("not poisoned")
			}
			if err := c.Reserve(1); !errors.Is(err, detcoll.ErrPoisoned) {
				t.Fatalf("a later call = %v", err)
			}
			start = time.Now()
			_ = c.Close()
			if d := time.Since(start); d > 4*time.Second {
				t.Fatalf("Close took %v", d)
			}
			t.Logf("survivor: %v after %v", err, took.Round(time.Millisecond))
		})
	}
}
