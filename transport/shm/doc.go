// Package shm is a transport.Transport for the ranks of one host: a shared
// memory segment in /dev/shm per communicator, one single-producer
// single-consumer byte ring per ordered pair of ranks, and — where the kernel
// allows it — single-copy transfers of large messages straight from the
// sender's buffer (process_vm_readv, Linux "cross memory attach", what Open
// MPI's vader uses).
//
// # Setup
//
// Every rank calls Connect with the same store, prefix and size. Rank 0
// creates the segment (O_EXCL, mode 0600, a random name
// /dev/shm/detcoll-<prefix hash>-<random>, fallocated so that an exhausted
// /dev/shm fails here and not with SIGBUS later), writes its header and
// publishes the name under prefix+"/shm/name"; the others open and map it,
// each writes its pid (and process start time) into its slot and publishes
// prefix+"/shm/mapped/<rank>". Once rank 0 has seen every rank mapped it
// unlinks the file: from then on the memory lives only as long as the
// mappings, so a crash leaves nothing in /dev/shm. A rank that sees rank 0
// die (or any failed Connect) unlinks the name too. If any rank cannot
// create or map the segment, every rank's Connect fails with ErrUnavailable
// (each reads every rank's outcome from the store), so a caller can fall
// back to TCP on all ranks together.
//
// # Messages
//
// A message is a 48-byte header (tag, length, flags, a magic word) followed
// by the payload, written into the ring of (sender, receiver). The sender
// copies in chunks and publishes its write position with an atomic store
// after each chunk (release); the receiver loads it (acquire), copies out
// and publishes its read position, so a message larger than the ring streams
// through it, pipelined. The receiver compares tag and length before it
// copies a byte of payload: a mismatch is *transport.TagError or
// transport.ErrSizeMismatch and leaves the message in the ring (the stream
// of that peer stays at the offending message, as in TCP).
//
// Messages of at least Options.DirectBytes whose receiver could read this
// process's memory at setup (a probe word read with process_vm_readv) carry
// only the sender's buffer address: the receiver checks the tag and length,
// copies the payload straight from the sender's memory into its own buffer
// (one copy instead of two), and hands the sender a done flag; Send returns
// after that. A sender that gives up (context, close) first wins a
// compare-and-swap against the receiver, so a receiver never reports data it
// may have read from a buffer already handed back.
//
// # Exposed buffers
//
// Transport implements transport.Exposer over its window: Expose stages a
// descriptor (address, length, and whether this rank takes part) instead of
// data; peers copy from the buffer with process_vm_readv and release the
// publication; Unexpose waits for every release. A rank takes part when it
// could read every peer at setup, the group has no more ranks than its
// CPUs, and Options.Expose allows it: ExposeAuto (the default) times a
// process_vm_readv against the window's copy in and copy out at Connect and
// takes part only where the read was faster (Transport.Calibration). Where
// any rank does not take part, every rank's Exposed fails with
// transport.ErrNoExpose on the same call. An exposure word per rank, cleared before the owner gives
// up or closes, makes a copy that overlapped the owner's withdrawal fail
// (ErrBroken) instead of returning bytes the owner may be overwriting.
//
// # Waiting
//
// A waiter spins briefly, then yields, then sleeps on a futex word of the
// ring (FUTEX_WAIT on shared memory, with a timeout); the other side wakes it
// only when its waiting flag is set. So ranks oversubscribing the cores
// (more ranks than cores) sleep instead of burning each other's time. The
// cores are runtime.NumCPU(), or $DETCOLL_NODE_CPUS (EnvNodeCPUs) where a
// launcher bound each rank to a share of the node's CPUs. Every
// wait re-checks, between sleeps: the context, this transport's closed flag,
// the peer's closed flag in the segment, a broken-stream flag of the ring,
// and (every few milliseconds) that the peer process is alive — its pid and
// process start time from /proc, a zombie counting as dead. A dead peer
// therefore fails a wait with transport.ErrPeerClosed within milliseconds
// instead of waiting for the deadline.
//
// Two ranks that find each other busy-waiting on one CPU part: the higher
// rank moves its thread to a CPU no peer waited on, by narrowing its
// affinity to it and restoring the original mask at once, so no thread
// stays pinned (at most once per 2 ms; DETCOLL_SHM_MOVE=0 turns it off).
//
// # Contract
//
// The transport package contract holds; messages already in the ring when a
// peer closes are still delivered. A context error before any byte of a
// message moved leaves the pair usable; after a partial message the ring is
// marked broken and both ends fail from then on. Sub implements
// transport.Splitter with a fresh segment per sub-group (same store).
//
// Linux only: elsewhere Connect returns ErrUnavailable.
package shm
