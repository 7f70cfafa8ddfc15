package devcomm

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

// signature identifies a collective call: every rank must call the same
// signatures in the same order. agreement (agree.go) compares it across
// ranks; its hash also travels in the peer-memory flags (ipc_run.go).
type signature struct {
	op       collOp
	dt       uint8
	acc      uint8
	alg      uint8
	gather   uint8
	lanes    uint32
	count    uint64
	laneHash uint64
	chunk    uint64
}

const sigBytes = 40

func (s signature) encode(b []byte) {
	b[0], b[1], b[2], b[3], b[4] = uint8(s.op), s.dt, s.acc, s.alg, s.gather
	binary.LittleEndian.PutUint32(b[8:], s.lanes)
	binary.LittleEndian.PutUint64(b[12:], s.count)
	binary.LittleEndian.PutUint64(b[20:], s.laneHash)
	binary.LittleEndian.PutUint64(b[28:], s.chunk)
	binary.LittleEndian.PutUint32(b[36:], 0xD1CE)
}

func decodeSig(b []byte) signature {
	return signature{op: collOp(b[0]), dt: b[1], acc: b[2], alg: b[3], gather: b[4],
		lanes: binary.LittleEndian.Uint32(b[8:]), count: binary.LittleEndian.Uint64(b[12:]),
		laneHash: binary.LittleEndian.Uint64(b[20:]), chunk: binary.LittleEndian.Uint64(b[28:])}
}

// hash is the full 64-bit FNV-1a hash of the encoded signature (written
// out: no allocation per call).
func (s signature) hash() uint64 {
	var b [sigBytes]byte
	s.encode(b[:])
	h := uint64(14695981039346656037)
	for _, x := range b {
		h ^= uint64(x)
		h *= 1099511628211
	}
	return h
}

// flagHash is the 32 bits of the hash that the peer-memory kernels
// compare (folded, never 0: 0 is the value of a line nobody wrote).
func (s signature) flagHash() uint32 {
	h := s.hash()
	v := uint32(h) ^ uint32(h>>32)
	if v == 0 {
		v = 1
	}
	return v
}

func (s signature) String() string {
	str := fmt.Sprintf("%s(count=%d, dtype=%v", s.op, s.count, dtype.DType(s.dt))
	switch s.op {
	case opAllReduce, opReduceScatter, opReduceScatterMany:
		str += fmt.Sprintf(", accumulate=%v, algorithm=%v", detcoll.Accumulate(s.acc), detcoll.Algorithm(s.alg))
	}
	str += ", gather=" + Gather(s.gather).String() + fmt.Sprintf(", chunk=%d", s.chunk)
	if s.op == opAllGatherMany || s.op == opReduceScatterMany {
		str += fmt.Sprintf(", lanes=%d, lane-counts-hash=%#x", s.lanes, s.laneHash)
	}
	return str + ")"
}

func laneHash(counts []int) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, n := range counts {
		binary.LittleEndian.PutUint64(b[:], uint64(n))
		h.Write(b[:])
	}
	return h.Sum64()
}
