package devcomm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/detcoll/detcoll"
	"github.com/detcoll/detcoll/dtype"
	"github.com/detcoll/detcoll/gpu/devrt"
)

// Setting up the peer-memory path at New: the staging allocation, the
// exchange of IPC handles, the decision (the same on every rank), the
// mapping of every peer's staging, and freeing it all.

// ipcState is a communicator's peer-memory path: its staging allocation,
// the peers' staging mapped here, the host-mapped error and abort words and
// the kernels for this W.
type ipcState struct {
	geom    ipcGeom
	timeout time.Duration
	own     DevicePtr
	bytes   int
	stage   [ipcMaxW]DevicePtr
	opened  []DevicePtr
	host    devrt.HostMem // u32 words, see ipcHost*
	rt      devrt.Runtime
	mod     devrt.Module
	fns     map[string]devrt.Function
	args    devrt.Args
	argBuf  [ipcArgBytes]byte
	a       ipcArgs
}

// setupIPC builds the peer-memory path when every rank is on one host,
// every pair of GPUs has peer access and every rank could allocate and
// export its staging buffer; otherwise it leaves c.ipc nil on every rank
// (the NCCL path, same bits) and says why in c.ipcWhy. Collective: every
// rank calls it at the same point of New.
func (c *Comm) setupIPC(ctx context.Context) error {
	if why := ipcOff(c.cfg.ipcBytes, c.size); why != "" {
		c.ipcWhy = why
		return nil
	}
	if c.cfg.ipcBytes < minIPCBytes {
		return fmt.Errorf("devcomm: New: %w: IPC capacity %d bytes is below the minimum %d", detcoll.ErrInvalidArgument, c.cfg.ipcBytes, minIPCBytes)
	}
	th := c.cfg.th
	st := &ipcState{rt: c.rt, args: c.rt.NewArgs(), timeout: c.cfg.ipcTimeout, geom: ipcGeom{w: c.size, capacity: c.cfg.ipcBytes &^ 255,
		maxBlocks: th.IPCMaxBlocks, blockBytes: th.IPCBlockBytes, llBytes: th.LLBytes, oneShot: th.OneShotBytes}}
	freeSt := func() { c.dev.Do(func() error { st.free(); return nil }) }
	all, why, err := c.ipcPublish(ctx, st)
	if err == nil && why == "" {
		why, err = c.ipcMap(ctx, st, all)
	}
	if err != nil || why != "" {
		freeSt()
		c.ipcWhy = why
		return err
	}
	c.ipc = st
	c.ipcWhy = ""
	return nil
}

// ipcOff says why the path is off before anything is tried ("" if not).
func ipcOff(capacity, w int) string {
	switch {
	case capacity == 0:
		return "turned off (" + IPCEnv + "=0 or WithIPC(0))"
	case w < 2:
		return "one rank"
	case w > ipcMaxW:
		return fmt.Sprintf("%d ranks: the IPC kernels serve at most %d", w, ipcMaxW)
	}
	return ""
}

// ipcPublish is round 1: allocate and export the staging buffer, publish
// host, GPU, handle, process and geometry, and decide from every rank's
// record. It returns the records (rank order) and why the path is off.
func (c *Comm) ipcPublish(ctx context.Context, st *ipcState) (all []byte, why string, err error) {
	mine := make([]byte, ipcRecordBytes)
	lerr := c.dev.Do(func() error { return st.allocate() })
	if lerr == nil {
		var h devrt.IpcHandle
		if h, lerr = c.rt.IpcGetMemHandle(st.own); lerr == nil {
			mine[0] = 1
			host, _ := os.Hostname()
			copy(mine[1:65], host)
			if u, err := c.dev.UUID(); err == nil {
				copy(mine[65:81], u[:])
			}
			copy(mine[81:145], h[:])
			binary.LittleEndian.PutUint64(mine[145:], uint64(os.Getpid()))
			st.geom.encode(mine[153:])
		}
	}
	all = make([]byte, ipcRecordBytes*c.size)
	if err := c.host.AllGather(ctx, mine, all, dtype.Byte); err != nil {
		return nil, "", fmt.Errorf("devcomm: New: exchanging IPC handles: %w", err)
	}
	why, err = ipcDecide(all)
	if err != nil {
		return nil, "", fmt.Errorf("devcomm: New: %w", err)
	}
	if lerr != nil {
		why = fmt.Sprintf("rank %d could not allocate or export its staging buffer: %v", c.rank, lerr)
	}
	return all, why, nil
}

// ipcMap is round 2: every peer's GPU visible here with peer access, and its
// staging mapped; every rank reports, so the answer is the same everywhere.
func (c *Comm) ipcMap(ctx context.Context, st *ipcState, all []byte) (why string, err error) {
	rec := func(p int) []byte { return all[p*ipcRecordBytes : (p+1)*ipcRecordBytes] }
	ok := byte(1)
	lerr := c.dev.Do(func() error { return st.open(c, rec) })
	if lerr != nil {
		ok = 0
	}
	oks := make([]byte, c.size)
	if err := c.host.AllGather(ctx, []byte{ok}, oks, dtype.Byte); err != nil {
		return "", fmt.Errorf("devcomm: New: agreeing on IPC: %w", err)
	}
	for p := 0; p < c.size; p++ {
		if oks[p] == 0 {
			why = fmt.Sprintf("rank %d cannot map every peer's memory", p)
			if p == c.rank && lerr != nil {
				why += ": " + lerr.Error()
			}
			return why, nil
		}
	}
	return "", nil
}

// allocate makes the staging buffer (zeroed), the host words and the
// kernels. Runs inside dev.Do.
func (st *ipcState) allocate() error {
	st.bytes = IPCHeaderBytes + 2*st.geom.capacity
	p, err := st.rt.MemAlloc(st.bytes)
	if err != nil {
		return err
	}
	st.own = p
	if err := st.rt.MemsetD8(p, 0, st.bytes); err != nil {
		return err
	}
	if st.host, err = st.rt.HostAlloc(ipcHostBytes); err != nil {
		return err
	}
	clear(st.host.Bytes)
	return nil
}

// open finds every peer's GPU, checks peer access, maps its staging buffer
// and compiles the kernels. Runs inside dev.Do.
func (st *ipcState) open(c *Comm, rec func(p int) []byte) error {
	n, err := c.rt.DeviceCount()
	if err != nil {
		return err
	}
	for p := 0; p < c.size; p++ {
		if p == c.rank {
			st.stage[p] = st.own
			continue
		}
		var uuid [16]byte
		copy(uuid[:], rec(p)[65:81])
		found := false
		for i := 0; i < n && !found; i++ {
			if u, err := c.rt.DeviceUUID(i); err == nil && u == uuid {
				found = true
				if ok, err := c.dev.Context().CanAccessPeer(i); err != nil || !ok {
					return fmt.Errorf("GPU %d has no peer access to rank %d's GPU %d (%v)", c.dev.Ordinal(), p, i, err)
				}
			}
		}
		if !found {
			return fmt.Errorf("rank %d's GPU is not visible to rank %d (CUDA_VISIBLE_DEVICES?)", p, c.rank)
		}
		var h devrt.IpcHandle
		copy(h[:], rec(p)[81:145])
		ptr, err := c.rt.IpcOpenMemHandle(h)
		if err != nil {
			return fmt.Errorf("opening rank %d's staging buffer: %w", p, err)
		}
		st.stage[p] = ptr
		st.opened = append(st.opened, ptr)
	}
	prog, err := c.rt.Build(ipcProgram(c.size), "detcoll_ipc.cu", c.dev.Props())
	if err != nil {
		return fmt.Errorf("compiling the IPC kernels: %w", err)
	}
	m, err := c.rt.ModuleLoad(prog.Image)
	if err != nil {
		c.rt.Invalidate(prog.Key)
		return fmt.Errorf("loading the IPC kernels: %w", err)
	}
	st.mod = m
	st.fns = map[string]devrt.Function{}
	for _, name := range ipcKernelNames() {
		fn, err := c.rt.ModuleFunction(m, name)
		if err != nil {
			return err
		}
		st.fns[name] = fn
	}
	st.a = ipcArgs{stage: st.stage, capacity: int64(st.geom.capacity), timeoutNS: int64(st.timeout),
		herr: st.hostPtr(ipcHostErr), habort: st.hostPtr(ipcHostAbort), rank: int32(c.rank), w: int32(c.size)}
	return nil
}

func (st *ipcState) hostPtr(off int) DevicePtr {
	return DevicePtr(uintptr(unsafe.Pointer(&st.host.Bytes[off])))
}

func (st *ipcState) word(off int) *uint32 {
	return (*uint32)(unsafe.Pointer(&st.host.Bytes[off]))
}

// The host-mapped words of a rank (u32, byte offsets; dc_ipc.herr points
// at the first): the error code the kernels record and the abort word the
// host sets, then what the first block to find a mismatch saw (written
// before the code, the peer word last).
const (
	ipcHostErr      = 0  // DC_IPC_ERR_* (device writes)
	ipcHostAbort    = 4  // non-zero: every wait gives up (host writes)
	ipcHostPeer     = 8  // the peer whose line differed, plus 1 (0: none recorded)
	ipcHostPeerCall = 12 // the peer's line: low 32 bits of its call number
	ipcHostPeerSig  = 16 // … and its folded signature hash
	ipcHostCall     = 20 // this rank's call that found it: low 32 bits of its number
	ipcHostSig      = 24 // … and its folded signature hash
	ipcHostBytes    = 64 // allocated per rank
)

// failed is the error a kernel recorded, or nil. It reads only the error
// code (no lock needed): ipcError names a mismatch's calls.
func (st *ipcState) failed() error {
	if st == nil || st.host.Len() == 0 {
		return nil
	}
	switch code := atomic.LoadUint32(st.word(ipcHostErr)); code {
	case 0:
		return nil
	case 2:
		return ErrIPCAborted
	case 1:
		return fmt.Errorf("%w (%v)", ErrIPCTimeout, st.timeout)
	case 4:
		return fmt.Errorf("%w: %w", detcoll.ErrMismatch, ErrIPCMismatch)
	default:
		return fmt.Errorf("IPC kernel error %d", code)
	}
}

// ipcMismatch is what the first block of a rank to find a mismatch saw:
// peer's line (peerCall, peerSig) where its own call (call, sig) was
// expected. peer is -1 when nothing was recorded.
type ipcMismatch struct {
	peer                         int
	peerCall, peerSig, call, sig uint32
}

// mismatch reads the mismatch record (after failed reported one).
func (st *ipcState) mismatch() ipcMismatch {
	p := atomic.LoadUint32(st.word(ipcHostPeer))
	if p == 0 || int(p) > ipcMaxW {
		return ipcMismatch{peer: -1, call: atomic.LoadUint32(st.word(ipcHostCall)), sig: atomic.LoadUint32(st.word(ipcHostSig))}
	}
	return ipcMismatch{peer: int(p) - 1,
		peerCall: atomic.LoadUint32(st.word(ipcHostPeerCall)), peerSig: atomic.LoadUint32(st.word(ipcHostPeerSig)),
		call: atomic.LoadUint32(st.word(ipcHostCall)), sig: atomic.LoadUint32(st.word(ipcHostSig))}
}

// abort makes every waiting kernel of this rank give up.
func (st *ipcState) abort() {
	if st != nil && st.host.Len() > 0 {
		atomic.StoreUint32(st.word(ipcHostAbort), 1)
	}
}

// free releases what allocate and open made. Runs inside dev.Do.
func (st *ipcState) free() error { return st.release(true) }

// release frees the kernels and the mappings of the peers' staging, and
// with own also this rank's staging and the host words. Without own they
// stay allocated (leaked): a peer's kernel may still write into them.
// Runs inside dev.Do.
func (st *ipcState) release(own bool) error {
	var errs []error
	if st.mod != 0 {
		errs = append(errs, st.rt.ModuleUnload(st.mod))
		st.mod = 0
	}
	for _, p := range st.opened {
		errs = append(errs, st.rt.IpcCloseMemHandle(p))
	}
	st.opened = nil
	if !own {
		return errors.Join(errs...)
	}
	if st.own != 0 {
		errs = append(errs, st.rt.MemFree(st.own))
		st.own = 0
	}
	if st.host.Len() > 0 {
		errs = append(errs, st.rt.HostFree(st.host))
		st.host = devrt.HostMem{}
	}
	return errors.Join(errs...)
}
