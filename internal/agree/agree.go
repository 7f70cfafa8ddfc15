// Package agree is the agreement primitive of detcoll's communicators, host
// and device alike: it decides whether a call's signature must be compared
// across ranks, numbers every call, and names what differs when the ranks
// disagree. It moves no data: the communicator runs the exchange over its
// own transport (the host Comm over its tagged messages, a device
// communicator over its host side-channel) and hands the bytes back here.
//
// # The promise
//
// Collectives are matched by call order. Every call that reaches the wire
// gets the communicator's next sequence number (1, 2, …) and the 64-bit hash
// of its signature record; together they are the call's identity (Call).
// The first time a communicator sees a record, every rank exchanges a
// proposal (sequence number and record) and Settle compares them all, so
// every rank learns the same verdict from the same bytes. A record agreed
// before is not exchanged again, but every message of every call, agreed
// before or not, carries its Call (the host transport's tag holds Seq and
// Sig), and a receiver that gets another Call than its own fails. Hence,
// for the n-th call of rank a and the n-th call of rank b:
//
//   - both new: the exchange shows the difference to every rank;
//   - one new, one agreed before: the one exchanges, the other sends data,
//     and each receives a message of the wrong kind;
//   - both agreed before: two different records in the cache never share a
//     hash, nor its 32-bit fold (Fold32): Settle does not cache a record
//     whose hash or fold an agreed record already owns, so such a record is
//     exchanged on every call. The hashes, and so the messages, differ.
//
// A skipped, extra or reordered call is caught at the first call number
// whose records differ between the ranks; two ranks whose calls differ
// only in data (same record) cannot be told apart by any protocol. A rank
// whose sequence differs (it is some calls ahead or behind) is named so.
//
// # Rules for the communicator
//
//   - Call Begin only when the call will reach the wire or poison the
//     communicator: after argument checks that can fail locally (those
//     leave the sequence alone and the communicator usable), never before.
//   - When Begin says needExchange, exchange Proposal bytes with every rank
//     (this rank's own included, in rank order) and call Settle (Compare
//     does both, given an all-gather); any error there, and any failure of
//     the call afterwards, must poison the communicator, because the ranks'
//     sequences may no longer agree.
//   - Put the Call in every message of the call (or, where messages carry no
//     tag, compare it wherever the peers meet). A channel of 32 bits (the
//     device's peer-memory flags) carries Fold32(Hash) and the low 32 bits
//     of Seq; Unfold names such a call again.
//   - A sub-communicator (Split) has its own Agreement, from sequence 1.
//
// # Use
//
//	a := agree.New(agree.Config{Describe: func(r agree.Record) string { return decode(r).String() }})
//	// per call, after the local argument checks:
//	var rec agree.Record
//	sig.encode(rec[:])
//	call, need := a.Begin(&rec)
//	if need {
//		err := a.Compare(rank, size, call, &rec, func(mine, all []byte) error {
//			return allGather(ctx, mine, all) // any channel that reaches every rank
//		})
//		// err != nil: poison (an *agree.MismatchError names the ranks)
//	}
//	// every message of the call carries call (Seq, Hash); a receiver that
//	// sees another one builds its error with a.TagMismatch(rank, call, &rec,
//	// a.Peer(peer, theirCall, theyWereExchanging), cause)
//
// An Agreement is not safe for concurrent use; the communicator's lock
// guards it.
package agree

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// ErrMismatch is the sentinel of every disagreement; the root package
// exports it as detcoll.ErrMismatch.
var ErrMismatch = errors.New("ranks called mismatched collectives")

// RecordSize is the size of a signature record. Each communicator encodes
// its own signature (operation, dtype, count, algorithm, …) into the first
// bytes and leaves the rest zero.
const RecordSize = 48

// Record is an encoded signature. Two calls are the same collective exactly
// when their records are equal.
type Record [RecordSize]byte

// Call is the identity of one call on the wire.
type Call struct {
	Seq  uint64 // the communicator's call number, from 1
	Hash uint64 // Hash of the call's record
}

func (c Call) String() string { return fmt.Sprintf("call %d (signature hash %#016x)", c.Seq, c.Hash) }

// Hash is the 64-bit FNV-1a hash of r.
func Hash(r *Record) uint64 {
	h := uint64(14695981039346656037)
	for _, b := range r {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return h
}

// Fold32 folds a hash to the 32 bits that a channel narrower than the
// message tag carries (the device's peer-memory flags); it is never 0,
// the value of a flag nobody wrote. Agreed records are distinct in Fold32
// too (Settle refuses to cache a record whose folded hash an agreed record
// owns), so the promise of the package doc holds on such a channel.
func Fold32(h uint64) uint32 {
	v := uint32(h) ^ uint32(h>>32)
	if v == 0 {
		v = 1
	}
	return v
}

// DefaultMaxAgreed is the default bound on agreed records.
const DefaultMaxAgreed = 4096

// Config configures New.
type Config struct {
	// Describe renders a record for error messages ("AllReduce(count=…)").
	// Nil prints the hash only.
	Describe func(r Record) string
	// MaxAgreed bounds the agreed records kept (0: DefaultMaxAgreed). When
	// full, the cache is emptied at once; every rank sees the same records
	// in the same order, so the caches stay identical across ranks.
	MaxAgreed int
}

// Agreement is one communicator's agreement state. See the package doc.
type Agreement struct {
	seq      uint64
	max      int
	describe func(r Record) string
	hash     func(r Record) uint64 // Hash; replaced in tests to force collisions (by value: a pointer would escape)

	agreed  map[Record]uint64 // agreed record → its hash
	owner   map[uint64]Record // hash → the agreed record that owns it
	owner32 map[uint32]Record // Fold32(hash) → the agreed record that owns it

	last     Record // the last agreed record, to skip the map on repeats
	lastHash uint64
	haveLast bool

	exchanges  int64
	collisions int64
}

// New returns an Agreement at sequence 0 (the first Begin is call 1).
func New(cfg Config) *Agreement {
	if cfg.MaxAgreed <= 0 {
		cfg.MaxAgreed = DefaultMaxAgreed
	}
	return &Agreement{max: cfg.MaxAgreed, describe: cfg.Describe, hash: func(r Record) uint64 { return Hash(&r) },
		agreed: map[Record]uint64{}, owner: map[uint64]Record{}, owner32: map[uint32]Record{}}
}

// Begin numbers the next call and reports whether its record must be
// exchanged (first sight, or a record whose hash an agreed one owns). It
// advances the sequence either way; see the package doc for when to call.
// It does not allocate.
func (a *Agreement) Begin(r *Record) (c Call, needExchange bool) {
	a.seq++
	if a.haveLast && *r == a.last {
		return Call{a.seq, a.lastHash}, false
	}
	if h, ok := a.agreed[*r]; ok {
		a.last, a.lastHash, a.haveLast = *r, h, true
		return Call{a.seq, h}, false
	}
	return Call{a.seq, a.hash(*r)}, true
}

// Seq is the number of the last call begun (0 before the first).
func (a *Agreement) Seq() uint64 { return a.seq }

// Exchanges counts the proposals settled (compared across ranks).
func (a *Agreement) Exchanges() int64 { return a.exchanges }

// Collisions counts agreed records left uncached because another agreed
// record owned their hash or folded hash (each is exchanged on every call).
func (a *Agreement) Collisions() int64 { return a.collisions }

// Agreed is the number of agreed records cached now.
func (a *Agreement) Agreed() int { return len(a.agreed) }

// ProposalSize is the size of one rank's proposal in an exchange.
const ProposalSize = 4 + 8 + 8 + RecordSize

const proposalMagic = 0xA9EE0001 // version 1 of the layout below

// Proposal writes this rank's proposal for call c with record r into dst
// (ProposalSize bytes): magic, sequence number, hash, record.
func Proposal(dst []byte, c Call, r *Record) {
	_ = dst[ProposalSize-1]
	binary.LittleEndian.PutUint32(dst[0:], proposalMagic)
	binary.LittleEndian.PutUint64(dst[4:], c.Seq)
	binary.LittleEndian.PutUint64(dst[12:], c.Hash)
	copy(dst[20:], r[:])
}

func decodeProposal(b []byte) (Call, Record, bool) {
	var r Record
	if len(b) < ProposalSize || binary.LittleEndian.Uint32(b) != proposalMagic {
		return Call{}, r, false
	}
	copy(r[:], b[20:ProposalSize])
	return Call{Seq: binary.LittleEndian.Uint64(b[4:]), Hash: binary.LittleEndian.Uint64(b[12:])}, r, true
}

// Settle compares every rank's proposal (all holds W proposals in rank
// order, this rank's at index rank) with this rank's call c and record r.
// When all agree it caches r (unless an agreed record owns its hash) and
// returns nil; otherwise a *MismatchError naming every rank that differs.
// Every rank that settles the same bytes returns the same verdict.
func (a *Agreement) Settle(rank int, c Call, r *Record, all []byte) error {
	a.exchanges++
	w := len(all) / ProposalSize
	var diff []PeerCall
	for p := 0; p < w; p++ {
		pc, pr, ok := decodeProposal(all[p*ProposalSize:])
		switch {
		case !ok:
			diff = append(diff, PeerCall{Rank: p, Desc: "an unreadable signature record"})
		case pc.Seq != c.Seq || pr != *r:
			diff = append(diff, PeerCall{Rank: p, Call: pc, Desc: a.Describe(&pr), Known: true})
		}
	}
	if diff != nil {
		return &MismatchError{Rank: rank, Mine: c, MineDesc: a.Describe(r), Peers: diff}
	}
	if len(a.agreed) >= a.max {
		clear(a.agreed)
		clear(a.owner)
		clear(a.owner32)
		a.haveLast = false
	}
	o, taken := a.owner[c.Hash]
	o32, taken32 := a.owner32[Fold32(c.Hash)]
	if taken && o != *r || taken32 && o32 != *r {
		a.collisions++
		return nil
	}
	a.agreed[*r] = c.Hash
	a.owner[c.Hash] = *r
	a.owner32[Fold32(c.Hash)] = *r
	a.last, a.lastHash, a.haveLast = *r, c.Hash, true
	return nil
}

// Compare runs the exchange of a call that Begin said needs one and settles
// it: it writes this rank's proposal, calls allGather (which must deliver
// every rank's ProposalSize bytes into all, rank p's at
// all[p*ProposalSize:], and may assume mine is already in place; it is not
// called when size is 1) and then Settle. An error of allGather is returned
// as is; the communicator must poison itself on any error.
func (a *Agreement) Compare(rank, size int, c Call, r *Record, allGather func(mine, all []byte) error) error {
	all := make([]byte, size*ProposalSize)
	mine := all[rank*ProposalSize : (rank+1)*ProposalSize]
	Proposal(mine, c, r)
	if size > 1 {
		if err := allGather(mine, all); err != nil {
			return err
		}
	}
	return a.Settle(rank, c, r, all)
}

// Describe renders r with the communicator's describer.
func (a *Agreement) Describe(r *Record) string {
	if a.describe == nil {
		return fmt.Sprintf("a collective with signature hash %#016x", Hash(r))
	}
	return a.describe(*r)
}

// Peer names what a peer was doing when one of its messages carried
// peer where this rank's call mine was expected. exchanging says the
// peer's message was a proposal (it was comparing a new signature). The
// peer's record is named when this rank agreed on one with that hash.
func (a *Agreement) Peer(rank int, peer Call, exchanging bool) PeerCall {
	pc := PeerCall{Rank: rank, Call: peer, Exchanging: exchanging}
	if exchanging {
		pc.Desc = "a collective it had not called before (its signature was being compared)"
		return pc
	}
	if r, ok := a.owner[peer.Hash]; ok {
		pc.Desc, pc.Known = a.Describe(&r), true
		return pc
	}
	pc.Desc = fmt.Sprintf("a collective unknown here (signature hash %#016x)", peer.Hash)
	return pc
}

// Unfold names a call that travelled on a channel narrower than the
// message tag, which carries only the low 32 bits of the call number and
// Fold32 of the hash (the device's peer-memory flags). The call number is
// the one nearest to Seq with those low bits (exact while the two are
// within 2³¹ calls); the hash and the description are those of the agreed
// record that owns the fold, the only one that can (Settle keeps folds
// distinct). A fold no agreed record owns (a record left uncached after a
// collision, or one agreed before the cache was emptied) gives Hash 0 and
// Known false. rank is the rank that made the call, this one included.
func (a *Agreement) Unfold(rank int, seq32, fold uint32) PeerCall {
	seq := a.seq + uint64(int64(int32(seq32-uint32(a.seq))))
	pc := PeerCall{Rank: rank, Call: Call{Seq: seq}}
	if r, ok := a.owner32[fold]; ok {
		pc.Call.Hash = a.agreed[r]
		pc.Desc, pc.Known = a.Describe(&r), true
		return pc
	}
	pc.Desc = fmt.Sprintf("a collective unknown here (folded signature hash %#08x)", fold)
	return pc
}

// TagMismatch is the error of a call c (record r) on rank whose message
// exchange met peer's call instead; cause is the transport's error.
func (a *Agreement) TagMismatch(rank int, c Call, r *Record, peer PeerCall, cause error) error {
	return &MismatchError{Rank: rank, Mine: c, MineDesc: a.Describe(r), Peers: []PeerCall{peer}, Cause: cause}
}

// PeerCall is what one other rank called, as far as this rank knows.
type PeerCall struct {
	Rank       int
	Call       Call // Seq 0 when unknown (an unreadable proposal)
	Desc       string
	Known      bool // Desc names the peer's signature
	Exchanging bool // the peer was comparing a new signature
}

// MismatchError says which ranks called what. It matches ErrMismatch and,
// when set, its Cause with errors.Is.
type MismatchError struct {
	Rank     int
	Mine     Call
	MineDesc string
	Peers    []PeerCall
	Cause    error
}

func (e *MismatchError) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%v: rank %d called %s as call %d", ErrMismatch, e.Rank, e.MineDesc, e.Mine.Seq)
	for _, p := range e.Peers {
		fmt.Fprintf(&sb, "; rank %d called %s", p.Rank, p.Desc)
		if p.Call.Seq != 0 {
			fmt.Fprintf(&sb, " as call %d", p.Call.Seq)
			if d := int64(p.Call.Seq - e.Mine.Seq); d != 0 {
				fmt.Fprintf(&sb, " (%s)", aheadBehind(d))
			}
		}
	}
	if e.Cause != nil {
		fmt.Fprintf(&sb, ": %v", e.Cause)
	}
	return sb.String()
}

func aheadBehind(d int64) string {
	n, dir := d, "ahead of"
	if d < 0 {
		n, dir = -d, "behind"
	}
	s := "s"
	if n == 1 {
		s = ""
	}
	return fmt.Sprintf("%d call%s %s this rank", n, s, dir)
}

// Unwrap lets errors.Is see ErrMismatch and the cause.
func (e *MismatchError) Unwrap() []error {
	if e.Cause != nil {
		return []error{ErrMismatch, e.Cause}
	}
	return []error{ErrMismatch}
}
