package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// resolveTimeout bounds the name lookups of checkHosts.
const resolveTimeout = 10 * time.Second

// hostInfo is what checkHosts learnt about the addresses of a Config.
type hostInfo struct {
	masterIP  net.IP // MasterAddr resolved
	bindIP    net.IP // where node 0's store listens
	advertise string // DETCOLL_TCP_HOST for the workers; "" leaves Env's
	hostable  bool   // MasterAddr is ours: serve the store if nobody does
}

// localIPs lists the addresses of this host's interfaces.
func localIPs() ([]net.IP, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	var ips []net.IP
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			ips = append(ips, n.IP)
		}
	}
	return ips, nil
}

func isLocal(ip net.IP, locals []net.IP) bool {
	return ip.IsLoopback() || slices.ContainsFunc(locals, ip.Equal)
}

func resolve(host string) ([]net.IP, error) {
	if ip := net.ParseIP(strings.Trim(host, "[]")); ip != nil {
		return []net.IP{ip}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	ips := make([]net.IP, len(addrs))
	for i, a := range addrs {
		ips[i] = a.IP
	}
	return ips, nil
}

// routeTo returns the address of this host that the kernel would use to
// reach ip:port. A UDP "connection" sends nothing; it only asks for a route.
func routeTo(ip net.IP, port int) (net.IP, error) {
	conn, err := net.Dial("udp", net.JoinHostPort(ip.String(), strconv.Itoa(max(port, 1))))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP, nil
}

// checkHosts resolves MasterAddr and TCPHost and checks them against this
// host: node 0 must own MasterAddr (it serves the store there), the other
// nodes must have a route to it, and TCPHost must be an address of this
// host. It fills c.hosts (and, when the node rank is assigned at the
// rendezvous, c.clientHosts for the case that another node serves).
func (c *Config) checkHosts() error {
	locals, err := localIPs()
	if err != nil {
		return fmt.Errorf("listing this host's addresses: %w", err)
	}
	ips, err := resolve(c.MasterAddr)
	if err != nil {
		return fmt.Errorf("MasterAddr (--master-addr) %q: %w", c.MasterAddr, err)
	}
	if c.AssignNodeRank {
		client, cerr := c.clientHostInfo(ips, locals)
		host, herr := c.serverHostInfo(ips, locals)
		switch {
		case herr == nil:
			c.hosts, c.clientHosts = host, client // try to serve; client if another node does
			c.hosts.hostable = true
			return nil
		case cerr != nil:
			return cerr
		}
		c.hosts, c.clientHosts = client, client
		return nil
	}
	if c.NodeRank == 0 {
		c.hosts, err = c.serverHostInfo(ips, locals)
	} else {
		c.hosts, err = c.clientHostInfo(ips, locals)
	}
	return err
}

// serverHostInfo is node 0's view: MasterAddr is one of its addresses.
func (c *Config) serverHostInfo(ips, locals []net.IP) (hostInfo, error) {
	var h hostInfo
	// Prefer a routable address: a host name often also resolves to
	// 127.0.1.1 or ::1, which the other nodes cannot reach.
	for _, ip := range ips {
		if isLocal(ip, locals) && (h.masterIP == nil || h.masterIP.IsLoopback()) {
			h.masterIP = ip
		}
	}
	if h.masterIP != nil && h.masterIP.IsLoopback() && c.Nnodes > 1 && net.ParseIP(strings.Trim(c.MasterAddr, "[]")) == nil {
		return h, fmt.Errorf("MasterAddr (--master-addr) %q resolves only to the loopback address %v here, which the other nodes cannot reach: give node 0's routable address",
			c.MasterAddr, h.masterIP)
	}
	if h.masterIP == nil {
		return h, fmt.Errorf("MasterAddr (--master-addr) %q (%v) is not an address of this host, and node 0 serves the store there: give node 0's own address (this host has %v)",
			c.MasterAddr, ips, locals)
	}
	h.bindIP = h.masterIP
	return h, c.advertise(&h, true, locals)
}

// clientHostInfo is the view of the other nodes: a route to MasterAddr.
func (c *Config) clientHostInfo(ips, locals []net.IP) (hostInfo, error) {
	var h hostInfo
	var errs []error
	for _, ip := range ips {
		src, err := routeTo(ip, c.StorePort)
		if err == nil {
			h.masterIP, h.advertise = ip, src.String()
			break
		}
		errs = append(errs, err)
	}
	if h.masterIP == nil {
		return h, fmt.Errorf("MasterAddr (--master-addr) %q (%v): no route from this host: %w", c.MasterAddr, ips, errors.Join(errs...))
	}
	return h, c.advertise(&h, false, locals)
}

// advertise sets h.advertise, DETCOLL_TCP_HOST for the workers.
func (c *Config) advertise(h *hostInfo, server bool, locals []net.IP) error {
	switch {
	case c.TCPHost != "":
		tips, err := resolve(c.TCPHost)
		if err != nil {
			return fmt.Errorf("TCPHost (--local-addr, %s) %q: %w", tcpHostEnv, c.TCPHost, err)
		}
		if !slices.ContainsFunc(tips, func(ip net.IP) bool { return isLocal(ip, locals) }) {
			return fmt.Errorf("TCPHost (--local-addr, %s) %q is not an address of this host (it has %v)", tcpHostEnv, c.TCPHost, locals)
		}
		h.advertise = c.TCPHost
	case envHas(c.Env, tcpHostEnv):
		h.advertise = "" // the workers' environment already says
	case c.Nnodes == 1 || h.masterIP.IsLoopback():
		h.advertise = "127.0.0.1"
	case server:
		h.advertise = h.masterIP.String()
	}
	return nil
}

func envHas(env []string, k string) bool { return envLookup(env, k) != "" }

// envLookup is the value of k in env, "" when absent; the last setting
// wins, as it does for a process started by os/exec.
func envLookup(env []string, k string) string {
	v := ""
	for _, kv := range env {
		if name, val, ok := strings.Cut(kv, "="); ok && name == k {
			v = val
		}
	}
	return v
}
