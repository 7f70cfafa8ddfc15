package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/detcoll/detcoll/launch"
	"github.com/detcoll/detcoll/store"
	"github.com/detcoll/detcoll/transport"
	"github.com/detcoll/detcoll/transport/shm"
	"github.com/detcoll/detcoll/transport/tcp"
)

// EnvTransport names the environment variable that picks the world
// communicator's transport: "auto" (the default), "shm" or "tcp".
const EnvTransport = "DETCOLL_TRANSPORT"

// Transport choices (Options.Transport, $DETCOLL_TRANSPORT).
const (
	TransportAuto = "auto"
	TransportSHM  = "shm"
	TransportTCP  = "tcp"
)

// ErrTransport is wrapped by the errors of an impossible transport choice.
var ErrTransport = errors.New("cluster: transport")

func hostKey(prefix string, rank int) string { return prefix + "/host/" + strconv.Itoa(rank) }

// HostID identifies the shared-memory domain of this process: the host name,
// the kernel's boot id, the /dev/shm file system (device and inode, which
// differ between containers with their own tmpfs) and the pid namespace
// (the shm transport checks peers' liveness by pid). Ranks with equal ids
// can use transport/shm.
func HostID() string {
	var b strings.Builder
	h, _ := os.Hostname()
	b.WriteString(h)
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	b.WriteString("|" + strings.TrimSpace(string(boot)))
	var st syscall.Stat_t
	if syscall.Stat("/dev/shm", &st) == nil {
		fmt.Fprintf(&b, "|shm %d:%d", st.Dev, st.Ino)
	} else {
		b.WriteString("|no /dev/shm")
	}
	ns, _ := os.Readlink("/proc/self/ns/pid")
	b.WriteString("|" + ns)
	return b.String()
}

// hostIDOf is HostID; tests give ranks of one process different hosts.
var hostIDOf = func(rank int) string { return HostID() }

// allLocal publishes this rank's HostID and reports whether every rank has
// the same one. Every rank reads every id, so all reach the same answer.
func allLocal(ctx context.Context, st store.Store, prefix string, rank, size int) (bool, error) {
	id := hostIDOf(rank)
	if err := st.Set(ctx, hostKey(prefix, rank), []byte(id)); err != nil {
		return false, err
	}
	local := true
	for p := 0; p < size; p++ {
		v, err := st.Get(ctx, hostKey(prefix, p))
		if err != nil {
			return false, fmt.Errorf("reading rank %d's host id: %w", p, err)
		}
		local = local && string(v) == id
	}
	return local, nil
}

// connect returns the world transport the options and the environment ask
// for: shm when every rank is on this host (auto) or when forced, TCP
// otherwise. Under auto, a shared-memory setup that fails on any rank
// (shm.ErrUnavailable reaches every rank together) falls back to TCP.
func connect(ctx context.Context, st store.Store, prefix string, env launch.Env, choice string, getenv func(string) string) (transport.Transport, error) {
	if choice == "" {
		choice = strings.ToLower(strings.TrimSpace(getenv(EnvTransport)))
	}
	if choice == "" {
		choice = TransportAuto
	}
	var sopt shm.Options
	if dl, ok := ctx.Deadline(); ok {
		sopt.ConnectTimeout = time.Until(dl)
	}
	switch choice {
	case TransportAuto, TransportSHM:
		local, err := allLocal(ctx, st, prefix, env.Rank, env.WorldSize)
		if err != nil {
			return nil, err
		}
		if !local {
			if choice == TransportSHM {
				return nil, fmt.Errorf("%w: shm forced (%s=shm) but not every rank is on this host (%s)", ErrTransport, EnvTransport, HostID())
			}
			break
		}
		t, err := shm.Connect(ctx, st, prefix, env.Rank, env.WorldSize, sopt)
		if err == nil {
			return t, nil
		}
		if choice == TransportSHM || !errors.Is(err, shm.ErrUnavailable) {
			return nil, err
		}
		// auto: every rank got ErrUnavailable; all take TCP.
	case TransportTCP:
	default:
		return nil, fmt.Errorf("%w: %s=%q (want auto, shm or tcp)", ErrTransport, EnvTransport, choice)
	}
	// The store's token authenticates the TCP handshake too (tcp.Options.Token).
	topt := tcp.Options{Host: getenv(tcp.EnvHost), Token: env.Token}
	if dl, ok := ctx.Deadline(); ok {
		topt.DialTimeout = time.Until(dl) // ctx bounds the whole rendezvous, not tcp's default
	}
	return tcp.Connect(ctx, st, prefix, env.Rank, env.WorldSize, topt)
}
