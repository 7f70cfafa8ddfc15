package tcp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
)

// sentFrame has tr send payload to the raw peer and returns the header the
// raw peer read, after checking that the payload bytes follow it as the
// header's layout says.
func sentFrame(t *testing.T, tr *Transport, raw *net.TCPConn, payload []byte) frameHeader {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- tr.Send(ctx, 1, tg(4), payload) }()
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	var hb [frameHeaderLen]byte
	if _, err := io.ReadFull(raw, hb[:]); err != nil {
		t.Fatal(err)
	}
	h, err := decodeFrameHeader(hb[:])
	if err != nil {
		t.Fatal(err)
	}
	if h.length != uint64(len(payload)) {
		t.Fatalf("header length %d, want %d", h.length, len(payload))
	}
	want := payload
	if h.flags == 0 {
		want = chunkedFrame(4, payload, h.shift, -1)[frameHeaderLen:]
	}
	got := make([]byte, len(want))
	if _, err := io.ReadFull(raw, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("flags %d: the bytes after the header differ from the frame's layout", h.flags)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return h
}

// TestLoopbackChecksumChoice: on a loopback connection the default sends
// payloads without checksum (flag set, shift and CRC 0); ChecksumAlways and
// $DETCOLL_TCP_CHECKSUM=always keep the chunk checksums.
func TestLoopbackChecksumChoice(t *testing.T) {
	payload := pattern(3<<20+7, 9) // several default chunks
	cases := []struct {
		name  string
		env   string
		opt   Options
		noCRC bool
	}{
		{name: "auto", noCRC: true},
		{name: "auto from env", env: "auto", noCRC: true},
		{name: "always", opt: Options{Checksum: ChecksumAlways}},
		{name: "always from env", env: "always"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvChecksum, tc.env)
			tr, raw := rawPeer(t, tc.opt)
			for _, p := range [][]byte{payload, payload[:100], nil} {
				h := sentFrame(t, tr, raw, p)
				if tc.noCRC {
					if h.flags != flagNoPayloadCRC || h.shift != 0 || h.crc != 0 {
						t.Fatalf("%d bytes: header %+v, want no payload checksum", len(p), h)
					}
				} else if h.flags != 0 || h.crc != crc32c(p[:h.firstChunk()]) {
					t.Fatalf("%d bytes: header %+v, want a payload checksum", len(p), h)
				}
			}
		})
	}
}

func TestChecksumOptionInvalid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	t.Setenv(EnvChecksum, "never")
	_, err := Connect(ctx, store.NewMemory(), uniquePrefix("sumenv"), 0, 2, Options{})
	if err == nil || !strings.Contains(err.Error(), EnvChecksum) {
		t.Fatalf("Connect with %s=never: %v", EnvChecksum, err)
	}
	t.Setenv(EnvChecksum, "")
	_, err = Connect(ctx, store.NewMemory(), uniquePrefix("sumopt"), 0, 2, Options{Checksum: 7})
	if err == nil || !strings.Contains(err.Error(), "Checksum") {
		t.Fatalf("Connect with Options.Checksum 7: %v", err)
	}
}

// TestRecvNoChecksumFrames: receivers take frames without payload checksum
// from any sender, and refuse unknown flags and a flag that contradicts the
// chunk fields.
func TestRecvNoChecksumFrames(t *testing.T) {
	p := pattern(70000, 6)
	noSum := func(n int, flags uint8, shift uint8, crc uint32) []byte {
		var b [frameHeaderLen]byte
		encodeFrameHeader(&b, frameHeader{tag: tg(7), length: uint64(n), flags: flags, shift: shift, crc: crc})
		return b[:]
	}
	cases := []struct {
		name  string
		wire  []byte
		close bool
		want  error // nil: the payload arrives
	}{
		{name: "accepted", wire: append(noSum(len(p), flagNoPayloadCRC, 0, 0), p...)},
		{name: "unknown flag", wire: append(noSum(len(p), 2, 0, 0), p...), want: transport.ErrCorrupt},
		{name: "flag with a checksum", wire: append(noSum(len(p), flagNoPayloadCRC, 0, crc32c(p)), p...), want: transport.ErrCorrupt},
		{name: "flag with chunks", wire: append(noSum(len(p), flagNoPayloadCRC, 12, 0), p...), want: transport.ErrCorrupt},
		{name: "short payload", wire: append(noSum(len(p), flagNoPayloadCRC, 0, 0), p[:1000]...), close: true, want: transport.ErrPeerClosed},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, raw := rawPeer(t, Options{})
			go func() {
				raw.Write(tc.wire)
				if tc.close {
					raw.Close()
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got := make([]byte, len(p))
			err := tr.Recv(ctx, 1, tg(7), got)
			switch {
			case tc.want == nil && err != nil:
				t.Fatal(err)
			case tc.want == nil && !bytes.Equal(got, p):
				t.Fatal("payload differs")
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("want %v, got %v", tc.want, err)
			}
		})
	}
}

// TestMixedChecksumRanks: ranks may differ in Options.Checksum; messages of
// every size go both ways, through Send/Recv and Exchange.
func TestMixedChecksumRanks(t *testing.T) {
	st, prefix := store.NewMemory(), uniquePrefix("summix")
	var ts [2]*Transport
	var errs [2]error
	var wg sync.WaitGroup
	for r, sum := range []Checksum{ChecksumAlways, ChecksumAuto} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ts[r], errs[r] = Connect(context.Background(), st, prefix, r, 2, Options{Checksum: sum, ChunkSize: 4096})
		}()
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	defer closeAll(ts[:])
	if ts[0].peers[1].snd.noCRC || !ts[1].peers[0].snd.noCRC {
		t.Fatal("the ranks' checksum choices were not applied")
	}
	for _, n := range []int{0, 1, 4095, 4097, 3*4096 + 1, 1<<20 + 5} {
		exchange(t, ts[0], ts[1], uint32(n), pattern(n, 1))
		exchange(t, ts[1], ts[0], uint32(n), pattern(n, 2))
	}
}

// TestNonLoopbackKeepsChecksum: a connection between non-loopback addresses
// checksums its payloads under ChecksumAuto.
func TestNonLoopbackKeepsChecksum(t *testing.T) {
	host := nonLoopbackAddr()
	if host == "" {
		t.Skip("this host has no non-loopback IPv4 address to connect over")
	}
	ts := connectGroup(t, store.NewMemory(), uniquePrefix("sumnet"), 2, Options{Host: host})
	defer closeAll(ts)
	if ts[0].peers[1].snd.noCRC || ts[1].peers[0].snd.noCRC {
		t.Fatalf("connection over %s sends without payload checksum", host)
	}
	exchange(t, ts[0], ts[1], 1, pattern(1<<20+3, 3))
}

func nonLoopbackAddr() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}
