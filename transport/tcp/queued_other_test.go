//go:build !linux

package tcp

import (
	"errors"
	"net"
)

func queuedIn(*net.TCPConn) (int, error) { return 0, errors.New("SIOCINQ is Linux-only") }
