//go:build !linux

package shm

import (
	"context"
	"fmt"

	"github.com/detcoll/detcoll/transport"
)

// Transport is not available on this system.
type Transport struct{ transport.Transport }

// Connect fails with ErrUnavailable: the shared-memory transport needs Linux.
func Connect(ctx context.Context, st Rendezvous, prefix string, rank, size int, opt Options) (*Transport, error) {
	return nil, &transport.Error{Op: "connect", Rank: rank, Peer: -1, Err: fmt.Errorf("%w: needs Linux", ErrUnavailable)}
}
