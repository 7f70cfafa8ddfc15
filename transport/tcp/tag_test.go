package tcp

import "github.com/detcoll/detcoll/transport"

// tg is the tag of phase n (sequence number and signature zero).
func tg(n uint32) transport.Tag { return transport.Tag{Phase: n} }
