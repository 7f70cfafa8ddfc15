package devcomm

import (
	"context"
	"fmt"

	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/internal/agree"
)

// The communicator's side of the agreement primitive (internal/agree, the
// same one the host Comm uses): every call that gets past its local checks
// is numbered (agree.Call: Seq and the 64-bit hash of its signature
// record); the first time a record is seen every rank exchanges a proposal
// over the host sub-communicator and every rank settles the same bytes;
// the peer-memory kernels carry the low 32 bits of Seq and Fold32 of the
// hash in their flags and compare them with every peer's (ipc_run.go,
// kernels/ipc_proto.cu). The NCCL transport carries nothing: what that
// leaves undetected is in docs/reliability.md ("Device communicator").

// newAgreement is a communicator's agreement, from call 1.
func newAgreement() *agree.Agreement {
	return agree.New(agree.Config{
		Describe:  func(r agree.Record) string { return decodeSig(r).String() },
		MaxAgreed: agree.DefaultMaxAgreed,
	})
}

// agreeOn numbers the call with record rec and, the first time this Comm
// sees rec, compares it across ranks over the host sub-communicator (ctx
// bounds that). Any error must poison the communicator: the call is
// numbered. A difference is an *agree.MismatchError (detcoll.ErrMismatch)
// naming every rank whose call differs, with its call number. Called with
// c.mu held.
func (c *Comm) agreeOn(ctx context.Context, rec *agree.Record) (agree.Call, error) {
	call, need := c.agree.Begin(rec)
	if !need {
		return call, nil
	}
	if c.size > 1 {
		c.stats.SignatureExchanges++
	}
	err := c.agree.Compare(c.rank, c.size, call, rec, func(mine, all []byte) error {
		// In place: mine is this rank's block of all.
		if err := c.host.AllGather(ctx, mine, all, dtype.Byte); err != nil {
			return fmt.Errorf("comparing %v (call %d) across ranks over the host communicator: %w", decodeSig(*rec), call.Seq, err)
		}
		return nil
	})
	return call, err
}

// ipcMismatchError is the error of a mismatch a peer-memory kernel found:
// its own call and the peer's, as the flags carried them (low 32 bits of
// the call number, folded hash), named from the agreed records. Called with
// c.mu held.
func (c *Comm) ipcMismatchError(m ipcMismatch) error {
	if m.peer < 0 { // not recorded (the kernels always record it first)
		return &agree.MismatchError{Rank: c.rank, Mine: c.call, Cause: ErrIPCMismatch,
			MineDesc: "a peer-memory collective at or before this call (the kernel recorded no details)"}
	}
	mine := c.agree.Unfold(c.rank, m.call, m.sig)
	return &agree.MismatchError{Rank: c.rank, Mine: mine.Call, MineDesc: mine.Desc, Cause: ErrIPCMismatch,
		Peers: []agree.PeerCall{c.agree.Unfold(m.peer, m.peerCall, m.peerSig)}}
}
