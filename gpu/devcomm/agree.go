package devcomm

import (
	"context"
	"fmt"
	"strings"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
)

// agreement is the cross-rank signature check of the communicator: the
// first time a signature is seen it is compared across ranks over the host
// sub-communicator (out of band, no device work); later calls with a known
// signature cost a map look-up (none when it repeats the last one). It is
// the whole of devcomm's copy of the check, behind one method, so that the
// shared agreement primitive of the host communicator can replace it here
// without touching the collectives. Used with the communicator's lock held.
type agreement struct {
	host      *detcoll.Comm // split off the job's communicator
	rank      int
	size      int
	seen      map[signature]struct{}
	last      signature // the last agreed signature (skips the map)
	exchanges int64     // first sightings compared across ranks
}

func newAgreement(host *detcoll.Comm, rank, size int) *agreement {
	return &agreement{host: host, rank: rank, size: size, seen: map[signature]struct{}{}}
}

// agree returns nil when every rank called s: at once for a signature
// agreed before, else after comparing it across ranks (ctx bounds that).
// A difference is detcoll.ErrMismatch naming every rank's call.
func (a *agreement) agree(ctx context.Context, s signature) error {
	if s == a.last {
		return nil
	}
	if ctx == nil {
		ctx = context.Background()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, ok := a.seen[s]; ok {
		a.last = s
		return nil
	}
	if a.size > 1 {
		if err := a.compare(ctx, s); err != nil {
			return err
		}
	}
	a.seen[s] = struct{}{}
	a.last = s
	return nil
}

func (a *agreement) compare(ctx context.Context, s signature) error {
	var mine [sigBytes]byte
	s.encode(mine[:])
	all := make([]byte, sigBytes*a.size)
	a.exchanges++
	if err := a.host.AllGather(ctx, mine[:], all, dtype.Byte); err != nil {
		return fmt.Errorf("comparing %v across ranks over the host communicator: %w", s, err)
	}
	var diff []string
	for p := 0; p < a.size; p++ {
		if ps := decodeSig(all[p*sigBytes:]); ps != s {
			diff = append(diff, fmt.Sprintf("rank %d called %v", p, ps))
		}
	}
	if diff != nil {
		return fmt.Errorf("%w: rank %d called %v; %s", detcoll.ErrMismatch, a.rank, s, strings.Join(diff, "; "))
	}
	return nil
}
