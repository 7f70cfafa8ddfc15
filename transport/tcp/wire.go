package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"

	"github.com/detcoll/detcoll/transport"
)

// castagnoli is the CRC-32C table; hash/crc32 uses the SSE4.2 / ARMv8 CRC
// instructions for it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Frame header, 48 bytes, little-endian:
//
//	off len field
//	  0   4 magic "dcF2"
//	  4   4 tag phase
//	  8   8 tag sequence number
//	 16   8 tag signature hash
//	 24   8 payload length in bytes
//	 32   1 chunk shift: 0 = the payload is one chunk; 12…30 = chunks of 1<<shift bytes
//	 33   1 flags: bit 0 = the payload carries no checksum (shift and CRC are 0)
//	 34   6 reserved, zero
//	 40   4 CRC-32C of the first chunk (of the whole payload when not chunked)
//	 44   4 CRC-32C of bytes 0…43 of this header
//
// The payload follows: the first chunk, then for every further chunk its
// 4-byte CRC-32C followed by its bytes. The last chunk may be short. A
// frame with flagNoPayloadCRC has its payload bytes alone after the header
// (the sender's choice, see Options.Checksum); the header keeps its CRC.
const (
	frameHeaderLen = 48
	frameMagic     = "dcF2"
	minChunkShift  = 12
	maxChunkShift  = 30

	flagNoPayloadCRC = 1
)

type frameHeader struct {
	tag    transport.Tag
	length uint64
	shift  uint8  // 0 or minChunkShift…maxChunkShift
	flags  uint8  // flagNoPayloadCRC or 0
	crc    uint32 // CRC-32C of the first chunk
}

// errBadFrame values are wrapped with transport.ErrCorrupt by the caller.
var (
	errShortHeader = errors.New("short frame header")
	errFrameMagic  = errors.New("bad frame magic")
	errHeaderCRC   = errors.New("frame header checksum mismatch")
	errReserved    = errors.New("reserved frame header bytes are not zero")
	errChunkShift  = errors.New("invalid chunk shift")
	errFlags       = errors.New("invalid frame flags")
)

// chunkLen is the length of the first chunk of a payload of n bytes.
func (h *frameHeader) firstChunk() uint64 {
	if h.shift == 0 || h.length <= 1<<h.shift {
		return h.length
	}
	return 1 << h.shift
}

func encodeFrameHeader(b *[frameHeaderLen]byte, h frameHeader) {
	copy(b[0:4], frameMagic)
	binary.LittleEndian.PutUint32(b[4:8], h.tag.Phase)
	binary.LittleEndian.PutUint64(b[8:16], h.tag.Seq)
	binary.LittleEndian.PutUint64(b[16:24], h.tag.Sig)
	binary.LittleEndian.PutUint64(b[24:32], h.length)
	b[32] = h.shift
	b[33] = h.flags
	clear(b[34:40])
	binary.LittleEndian.PutUint32(b[40:44], h.crc)
	binary.LittleEndian.PutUint32(b[44:48], crc32c(b[0:44]))
}

// decodeFrameHeader parses and validates a frame header. It never trusts the
// length: the caller compares it with the size it expects before reading.
func decodeFrameHeader(b []byte) (frameHeader, error) {
	if len(b) < frameHeaderLen {
		return frameHeader{}, errShortHeader
	}
	b = b[:frameHeaderLen]
	if string(b[0:4]) != frameMagic {
		return frameHeader{}, fmt.Errorf("%w %q", errFrameMagic, b[0:4])
	}
	if got, want := crc32c(b[0:44]), binary.LittleEndian.Uint32(b[44:48]); got != want {
		return frameHeader{}, fmt.Errorf("%w (%#08x, header says %#08x)", errHeaderCRC, got, want)
	}
	for _, x := range b[34:40] {
		if x != 0 {
			return frameHeader{}, errReserved
		}
	}
	h := frameHeader{
		tag: transport.Tag{
			Phase: binary.LittleEndian.Uint32(b[4:8]),
			Seq:   binary.LittleEndian.Uint64(b[8:16]),
			Sig:   binary.LittleEndian.Uint64(b[16:24]),
		},
		length: binary.LittleEndian.Uint64(b[24:32]),
		shift:  b[32],
		flags:  b[33],
		crc:    binary.LittleEndian.Uint32(b[40:44]),
	}
	if h.shift != 0 && (h.shift < minChunkShift || h.shift > maxChunkShift) {
		return frameHeader{}, fmt.Errorf("%w %d", errChunkShift, h.shift)
	}
	if h.flags&^flagNoPayloadCRC != 0 || h.flags != 0 && (h.shift != 0 || h.crc != 0) {
		return frameHeader{}, fmt.Errorf("%w %#02x (chunk shift %d, payload CRC %#08x)", errFlags, h.flags, h.shift, h.crc)
	}
	return h, nil
}

// Handshake message, 108 bytes, little-endian. The dialer (higher rank)
// sends a hello. Without tokens the acceptor answers accept or reject. With
// a token (flags bit 0 on both sides) it answers a challenge carrying its own
// nonce and MAC, the dialer answers auth carrying its MAC, and only then does
// the acceptor check the hello's content and answer accept or reject. A
// connection that is not a detcoll hello, or fails authentication, is closed
// without an answer.
//
//	off len field
//	  0   4 magic "dcH2"
//	  4   2 protocol version
//	  6   1 kind: 1 hello, 2 accept, 3 reject, 4 challenge, 5 auth
//	  7   1 reject reason (0 otherwise)
//	  8   8 group: FNV-1a 64 of the key prefix
//	 16   8 members: FNV-1a 64 of a sub-group's parent-rank list (0 for a top-level group)
//	 24   4 sender's rank
//	 28   4 receiver's rank
//	 32   4 group size
//	 36   4 flags: bit 0 = the sender authenticates with a token
//	 40  32 nonce (hello: the dialer's; challenge: the acceptor's; else zero)
//	 72  32 MAC (challenge, auth: HMAC-SHA256, see handshakeMAC; else zero)
//	104   4 CRC-32C of bytes 0…103
const (
	helloLen        = 108
	helloMagic      = "dcH2"
	protocolVersion = 3 // 3: frames may carry flagNoPayloadCRC, which version 2 refused as reserved bytes
	nonceLen        = 32
	macOff          = 72 // the MAC covers a message's bytes before this offset
)

const (
	kindHello     = 1
	kindAccept    = 2
	kindReject    = 3
	kindChallenge = 4
	kindAuth      = 5
)

const flagAuth = 1

// Reject reasons.
const (
	reasonNone = iota
	reasonVersion
	reasonGroup
	reasonMembers
	reasonSize
	reasonRank
	reasonDuplicate
	reasonAuth
)

func reasonString(r uint8) string {
	switch r {
	case reasonVersion:
		return "protocol version mismatch"
	case reasonGroup:
		return "group mismatch (another key prefix: a stale or mis-addressed connection)"
	case reasonMembers:
		return "sub-group member list mismatch"
	case reasonSize:
		return "group size mismatch"
	case reasonRank:
		return "rank mismatch (mis-addressed connection)"
	case reasonDuplicate:
		return "duplicate connection from this rank"
	case reasonAuth:
		return "authentication mismatch (one side has Options.Token, the other none)"
	}
	return fmt.Sprintf("reason %d", r)
}

type hello struct {
	version uint16
	kind    uint8
	reason  uint8
	group   uint64
	members uint64
	from    uint32
	to      uint32
	size    uint32
	flags   uint32
	nonce   [nonceLen]byte
	mac     [sha256.Size]byte
}

var (
	errShortHello = errors.New("short handshake")
	errHelloMagic = errors.New("bad handshake magic")
	errHelloCRC   = errors.New("handshake checksum mismatch")
	errHelloKind  = errors.New("bad handshake kind")
)

func encodeHello(b *[helloLen]byte, h hello) {
	copy(b[0:4], helloMagic)
	binary.LittleEndian.PutUint16(b[4:6], h.version)
	b[6] = h.kind
	b[7] = h.reason
	binary.LittleEndian.PutUint64(b[8:16], h.group)
	binary.LittleEndian.PutUint64(b[16:24], h.members)
	binary.LittleEndian.PutUint32(b[24:28], h.from)
	binary.LittleEndian.PutUint32(b[28:32], h.to)
	binary.LittleEndian.PutUint32(b[32:36], h.size)
	binary.LittleEndian.PutUint32(b[36:40], h.flags)
	copy(b[40:72], h.nonce[:])
	copy(b[72:104], h.mac[:])
	binary.LittleEndian.PutUint32(b[104:108], crc32c(b[0:104]))
}

// decodeHello parses a handshake message; it checks framing (magic, checksum,
// kind) but not its content, which the caller compares with what it expects.
func decodeHello(b []byte) (hello, error) {
	if len(b) < helloLen {
		return hello{}, errShortHello
	}
	b = b[:helloLen]
	if string(b[0:4]) != helloMagic {
		return hello{}, errHelloMagic
	}
	if crc32c(b[0:104]) != binary.LittleEndian.Uint32(b[104:108]) {
		return hello{}, errHelloCRC
	}
	h := hello{
		version: binary.LittleEndian.Uint16(b[4:6]),
		kind:    b[6],
		reason:  b[7],
		group:   binary.LittleEndian.Uint64(b[8:16]),
		members: binary.LittleEndian.Uint64(b[16:24]),
		from:    binary.LittleEndian.Uint32(b[24:28]),
		to:      binary.LittleEndian.Uint32(b[28:32]),
		size:    binary.LittleEndian.Uint32(b[32:36]),
		flags:   binary.LittleEndian.Uint32(b[36:40]),
	}
	copy(h.nonce[:], b[40:72])
	copy(h.mac[:], b[72:104])
	if h.kind < kindHello || h.kind > kindAuth {
		return hello{}, fmt.Errorf("%w %d", errHelloKind, h.kind)
	}
	return h, nil
}

// MAC labels: the two roles never compute the same MAC, so neither side's
// MAC can be reflected back as the other's.
const (
	labelAcceptor = "detcoll/tcp/handshake/v2/acceptor"
	labelDialer   = "detcoll/tcp/handshake/v2/dialer"
)

// handshakeMAC is HMAC-SHA256 under the job token over the role label, the
// key prefix as this side knows it, the dialer's hello (everything but its
// MAC field: prefix hash, member-list hash, both ranks, the size, flags and
// the dialer's nonce) and the acceptor's challenge (the same fields as the
// acceptor sees them, and its nonce). Each side's nonce is fresh, so a MAC
// recorded from one handshake is worthless in any other.
func handshakeMAC(token []byte, label, prefix string, helloMsg, challengeMsg *[helloLen]byte) [sha256.Size]byte {
	m := hmac.New(sha256.New, token)
	var n [8]byte
	m.Write([]byte(label))
	binary.LittleEndian.PutUint64(n[:], uint64(len(prefix)))
	m.Write(n[:])
	m.Write([]byte(prefix))
	m.Write(helloMsg[:macOff])
	m.Write(challengeMsg[:macOff])
	var out [sha256.Size]byte
	m.Sum(out[:0])
	return out
}

func newNonce() ([nonceLen]byte, error) {
	var b [nonceLen]byte
	_, err := rand.Read(b[:])
	return b, err
}

// prefixHash identifies a group in the handshake by its key prefix.
func prefixHash(prefix string) uint64 {
	f := fnv.New64a()
	f.Write([]byte(prefix))
	return f.Sum64()
}

// membersHash identifies a sub-group's parent-rank list, so members that
// disagree on it never connect; 0 for a top-level group (nil list).
func membersHash(members []int) uint64 {
	if members == nil {
		return 0
	}
	f := fnv.New64a()
	var b [8]byte
	for _, m := range members {
		binary.LittleEndian.PutUint64(b[:], uint64(m))
		f.Write(b[:])
	}
	return f.Sum64() | 1 // never 0
}
