package tcp

import (
	"bytes"
	"testing"

	"github.com/detcoll/detcoll/transport"
)

// FuzzFrameHeader feeds arbitrary bytes to the frame-header and handshake
// decoders. They must never panic, must reject short input, and whatever they
// accept must re-encode to the same bytes and describe a sane chunking.
func FuzzFrameHeader(f *testing.F) {
	var fb [frameHeaderLen]byte
	encodeFrameHeader(&fb, frameHeader{tag: tg(7), length: 100, crc: 0xdeadbeef})
	f.Add(fb[:])
	encodeFrameHeader(&fb, frameHeader{tag: transport.Tag{Phase: ^uint32(0), Seq: ^uint64(0), Sig: ^uint64(0)}, length: ^uint64(0), shift: maxChunkShift, crc: 1})
	f.Add(fb[:])
	encodeFrameHeader(&fb, frameHeader{length: 1 << 20, shift: minChunkShift})
	f.Add(fb[:])
	encodeFrameHeader(&fb, frameHeader{tag: tg(3), length: 1 << 20, flags: flagNoPayloadCRC})
	f.Add(fb[:])
	var hb [helloLen]byte
	encodeHello(&hb, hello{version: protocolVersion, kind: kindHello, group: prefixHash("g"), members: membersHash([]int{2, 0}), from: 1, to: 0, size: 2})
	f.Add(hb[:])
	encodeHello(&hb, hello{version: protocolVersion, kind: kindReject, reason: reasonSize})
	f.Add(hb[:])
	f.Add([]byte{})
	f.Add([]byte("dcF2"))
	f.Add([]byte("dcH1\x01\x00\x01\x00"))
	f.Add(bytes.Repeat([]byte{0xff}, 64))

	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeFrameHeader(b)
		if err == nil {
			if len(b) < frameHeaderLen {
				t.Fatalf("accepted a %d-byte header", len(b))
			}
			var re [frameHeaderLen]byte
			encodeFrameHeader(&re, h)
			if !bytes.Equal(re[:], b[:frameHeaderLen]) {
				t.Fatalf("header %x re-encodes as %x", b[:frameHeaderLen], re)
			}
			if h.shift != 0 && (h.shift < minChunkShift || h.shift > maxChunkShift) {
				t.Fatalf("accepted chunk shift %d", h.shift)
			}
			if h.flags&^flagNoPayloadCRC != 0 || h.flags != 0 && (h.shift != 0 || h.crc != 0) {
				t.Fatalf("accepted flags %#x with shift %d, crc %#x", h.flags, h.shift, h.crc)
			}
			if first := h.firstChunk(); first > h.length || (h.shift != 0 && first > 1<<h.shift) {
				t.Fatalf("first chunk %d of %d (shift %d)", first, h.length, h.shift)
			}
		}
		m, err := decodeHello(b)
		if err == nil {
			if len(b) < helloLen {
				t.Fatalf("accepted a %d-byte hello", len(b))
			}
			var re [helloLen]byte
			encodeHello(&re, m)
			if !bytes.Equal(re[:], b[:helloLen]) {
				t.Fatalf("hello %x re-encodes as %x", b[:helloLen], re)
			}
			if m.kind < kindHello || m.kind > kindReject {
				t.Fatalf("accepted kind %d", m.kind)
			}
			_ = reasonString(m.reason)
		}
		// Bytes whose header fields are right but whose checksums are
		// recomputed by an attacker still decode within limits.
		if len(b) >= frameHeaderLen {
			c := append([]byte(frameMagic), b[4:frameHeaderLen]...)
			resealHeader(c)
			if h, err := decodeFrameHeader(c); err == nil && h.shift != 0 && (h.shift < minChunkShift || h.shift > maxChunkShift) {
				t.Fatalf("accepted chunk shift %d", h.shift)
			}
		}
	})
}
