package tcp

import (
	"encoding/binary"

	"github.com/detcoll/detcoll/transport"
)

// The sending side of a frame: the header, the payload's chunks and their
// checksums (see the package doc, "Frames").

// parallelCRC makes Send checksum multi-chunk frames in a helper goroutine
// that runs ahead of the writes, so the checksum is off the critical path
// (64 MiB loopback streams went from 75–85% to 95–100% of raw TCP, on 16
// cores and on 2). Benchmarks and tests switch it off for comparison.
var parallelCRC = true

// Frames of at least parallelMinChunks chunks use the helper; crcTokens
// bounds how many chunks such a frame may have (the token channel never
// fills, so the helper never blocks; a chan struct{} buffer costs nothing).
const (
	parallelMinChunks = 2
	crcTokens         = 1 << 20
)

// crcLoop is the helper: it checksums the chunks of d.pbuf in order, stores
// each in d.crcs and hands a token per chunk to the writer.
func (d *direction) crcLoop() {
	defer d.helper.Done()
	buf, size := d.pbuf, 1<<d.pshift
	for k, off := 0, 0; off < len(buf); k++ {
		if d.abort.Load() {
			return
		}
		end := min(off+size, len(buf))
		d.crcs[k] = crc32c(buf[off:end])
		d.crcReady <- struct{}{}
		off = end
	}
}

// frame is the header of a frame of buf that is sent in one piece.
func (d *direction) frame(tag transport.Tag, buf []byte, shift uint8) frameHeader {
	h := frameHeader{tag: tag, length: uint64(len(buf))}
	if d.noCRC {
		h.flags = flagNoPayloadCRC
	} else {
		h.shift, h.crc = shift, crc32c(buf)
	}
	return h
}

func (d *direction) writeFrame(tag transport.Tag, buf []byte, shift uint8) (moved bool, err error) {
	defer clear(d.bufs[:]) // do not keep the caller's buffer
	n := len(buf)
	if d.noCRC {
		encodeFrameHeader(&d.hdr, d.frame(tag, buf, shift))
		d.bufs[0], d.bufs[1] = d.hdr[:], buf
		d.nb = d.bufs[:]
		w, err := d.nb.WriteTo(d.c)
		return w > 0, err
	}
	first := n
	if shift != 0 && n > 1<<shift {
		first = 1 << shift
		if k := (n + first - 1) >> shift; parallelCRC && k >= parallelMinChunks && k <= crcTokens {
			return d.writeChunksParallel(tag, buf, shift, k)
		}
	}
	encodeFrameHeader(&d.hdr, frameHeader{tag: tag, length: uint64(n), shift: shift, crc: crc32c(buf[:first])})
	d.bufs[0], d.bufs[1] = d.hdr[:], buf[:first]
	d.nb = d.bufs[:]
	if w, err := d.nb.WriteTo(d.c); err != nil {
		return w > 0, err
	}
	for off := first; off < n; {
		end := min(off+1<<shift, n)
		chunk := buf[off:end]
		binary.LittleEndian.PutUint32(d.crc[:], crc32c(chunk))
		d.bufs[0], d.bufs[1] = d.crc[:], chunk
		d.nb = d.bufs[:]
		if _, err := d.nb.WriteTo(d.c); err != nil {
			return true, err
		}
		off = end
	}
	return true, nil
}

// writeChunksParallel writes a frame of k chunks while the helper computes
// their checksums ahead of it.
func (d *direction) writeChunksParallel(tag transport.Tag, buf []byte, shift uint8, k int) (moved bool, err error) {
	if cap(d.crcs) < k {
		d.crcs = make([]uint32, k) // grows with this rank's own largest message only
	}
	d.crcs = d.crcs[:k]
	d.pbuf, d.pshift = buf, shift
	d.abort.Store(false)
	d.helper.Add(1)
	go d.crcLoopFn()
	defer func() {
		d.abort.Store(true)
		d.helper.Wait()
		for len(d.crcReady) > 0 {
			<-d.crcReady
		}
		d.pbuf = nil
	}()
	size := 1 << shift
	for i, off := 0, 0; i < k; i++ {
		<-d.crcReady
		end := min(off+size, len(buf))
		if i == 0 {
			encodeFrameHeader(&d.hdr, frameHeader{tag: tag, length: uint64(len(buf)), shift: shift, crc: d.crcs[0]})
			d.bufs[0] = d.hdr[:]
		} else {
			binary.LittleEndian.PutUint32(d.crc[:], d.crcs[i])
			d.bufs[0] = d.crc[:]
		}
		d.bufs[1] = buf[off:end]
		d.nb = d.bufs[:]
		if w, err := d.nb.WriteTo(d.c); err != nil {
			return i > 0 || w > 0, err
		}
		off = end
	}
	return true, nil
}
