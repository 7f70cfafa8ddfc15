//go:build unix && !noexchange

package main

import (
	"context"

	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/transport/tcp"
)

func init() {
	exchangeFn = func(t *tcp.Transport, ctx context.Context, tg transport.Tag, s, r func(int) ([]byte, bool), rep func(error)) {
		t.Exchange(ctx, tg, s, r, rep)
	}
}
