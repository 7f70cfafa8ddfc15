package devcomm

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/agree"
)

// signature identifies a collective call: every rank must call the same
// signatures in the same order. Its record (the first 36 bytes of an
// agree.Record, the rest zero) is what the agreement (agree.go) numbers,
// hashes and compares; the fold of the hash travels in the peer-memory
// flags (ipc_run.go).
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

// sigBytes is the part of the record a signature uses.
const sigBytes = 36

// record is s encoded as an agreement record.
func (s signature) record() agree.Record {
	var r agree.Record
	b := r[:sigBytes]
	b[0], b[1], b[2], b[3], b[4] = uint8(s.op), s.dt, s.acc, s.alg, s.gather
	binary.LittleEndian.PutUint32(b[8:], s.lanes)
	binary.LittleEndian.PutUint64(b[12:], s.count)
	binary.LittleEndian.PutUint64(b[20:], s.laneHash)
	binary.LittleEndian.PutUint64(b[28:], s.chunk)
	return r
}

func decodeSig(r agree.Record) signature {
	b := r[:]
	return signature{op: collOp(b[0]), dt: b[1], acc: b[2], alg: b[3], gather: b[4],
		lanes: binary.LittleEndian.Uint32(b[8:]), count: binary.LittleEndian.Uint64(b[12:]),
		laneHash: binary.LittleEndian.Uint64(b[20:]), chunk: binary.LittleEndian.Uint64(b[28:])}
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
