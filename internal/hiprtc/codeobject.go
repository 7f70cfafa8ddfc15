package hiprtc

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
)

// emAMDGPU is the ELF machine of AMD GPU code objects.
const emAMDGPU = 224

// machProcessors maps EF_AMDGPU_MACH (the low byte of e_flags) to the
// processor, for the targets detcoll names (LLVM's AMDGPUUsage table).
var machProcessors = map[uint32]string{
	0x02c: "gfx900", 0x02f: "gfx906", 0x030: "gfx908", 0x03f: "gfx90a",
	0x040: "gfx940", 0x04b: "gfx941", 0x04c: "gfx942", 0x04f: "gfx950",
	0x033: "gfx1010", 0x036: "gfx1030", 0x041: "gfx1100", 0x043: "gfx1150",
	0x048: "gfx1200", 0x04e: "gfx1201",
}

// Kernel descriptor fields (AMDGPU code object v3 and later: a 64-byte
// <kernel>.kd symbol in .rodata).
const (
	kdSize          = 64
	kdRsrc1         = 48 // compute_pgm_rsrc1, u32
	kdCodeProps     = 56 // kernel_code_properties, u16
	wave32Bit       = 1 << 10
	roundShift32    = 12 // FLOAT_ROUND_MODE_32, 2 bits
	roundShift16_64 = 14 // FLOAT_ROUND_MODE_16_64
	denormShift32   = 16 // FLOAT_DENORM_MODE_32
	denormShift1664 = 18 // FLOAT_DENORM_MODE_16_64
)

// Float modes of a kernel descriptor.
const (
	RoundNearestEven = 0 // FLOAT_ROUND_MODE_NEAR_EVEN
	DenormFlushNone  = 3 // FLOAT_DENORM_MODE_FLUSH_NONE: denormals kept on input and output
)

// Kernel is what a kernel descriptor says about one kernel.
type Kernel struct {
	Name         string
	RoundF32     int // FLOAT_ROUND_MODE_32 (0: nearest even)
	RoundF16F64  int // FLOAT_ROUND_MODE_16_64
	DenormF32    int // FLOAT_DENORM_MODE_32 (3: flush nothing; 0: flush inputs and outputs)
	DenormF16F64 int // FLOAT_DENORM_MODE_16_64
	Wave32       bool
}

// WavefrontSize is 32 or 64.
func (k Kernel) WavefrontSize() int {
	if k.Wave32 {
		return 32
	}
	return 64
}

// CodeObject is what Inspect found in an AMD GPU code object.
type CodeObject struct {
	Mach      uint32 // EF_AMDGPU_MACH
	Processor string // from Mach; "" when detcoll does not know that value
	Kernels   []Kernel
}

// Kernel returns the named kernel's descriptor.
func (c *CodeObject) Kernel(name string) (Kernel, bool) {
	for _, k := range c.Kernels {
		if k.Name == name {
			return k, true
		}
	}
	return Kernel{}, false
}

// CheckArithmetic returns an error naming every kernel whose descriptor
// does not round to nearest even or flushes denormals, for f32 or f16/f64.
func (c *CodeObject) CheckArithmetic() error {
	if len(c.Kernels) == 0 {
		return fmt.Errorf("code object has no kernels")
	}
	var bad []string
	for _, k := range c.Kernels {
		if k.RoundF32 != RoundNearestEven || k.RoundF16F64 != RoundNearestEven || k.DenormF32 != DenormFlushNone || k.DenormF16F64 != DenormFlushNone {
			bad = append(bad, fmt.Sprintf("%s (round %d/%d, denormals %d/%d)", k.Name, k.RoundF32, k.RoundF16F64, k.DenormF32, k.DenormF16F64))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("kernels not compiled for IEEE round-to-nearest-even with denormals kept (docs/contract.md, section add(a, b) per dtype): %s", strings.Join(bad, ", "))
	}
	return nil
}

// Inspect reads an AMD GPU code object (the ELF hiprtc returns): its
// processor and, for every kernel, the float modes and the wavefront size
// from its kernel descriptor.
func Inspect(image []byte) (*CodeObject, error) {
	f, err := elf.NewFile(bytes.NewReader(image))
	if err != nil {
		return nil, fmt.Errorf("hiprtc: not an ELF code object: %w", err)
	}
	defer f.Close()
	if f.Machine != emAMDGPU || f.Class != elf.ELFCLASS64 {
		return nil, fmt.Errorf("hiprtc: ELF machine %d class %v is not an AMD GPU code object", f.Machine, f.Class)
	}
	var flags uint32
	if len(image) >= 0x34 {
		flags = binary.LittleEndian.Uint32(image[0x30:]) // e_flags of an ELF64 header
	}
	obj := &CodeObject{Mach: flags & 0xff}
	obj.Processor = machProcessors[obj.Mach]
	syms, err := f.DynamicSymbols()
	if err != nil || len(syms) == 0 {
		syms, err = f.Symbols()
	}
	if err != nil {
		return nil, fmt.Errorf("hiprtc: code object symbols: %w", err)
	}
	seen := map[string]bool{}
	for _, s := range syms {
		name, ok := strings.CutSuffix(s.Name, ".kd")
		if !ok || seen[name] || int(s.Section) >= len(f.Sections) || s.Section == elf.SHN_UNDEF {
			continue
		}
		sec := f.Sections[s.Section]
		off := s.Value - sec.Addr
		if s.Value < sec.Addr || off+kdSize > sec.Size {
			return nil, fmt.Errorf("hiprtc: kernel descriptor %s outside its section", s.Name)
		}
		kd := make([]byte, kdSize)
		if _, err := sec.ReadAt(kd, int64(off)); err != nil {
			return nil, fmt.Errorf("hiprtc: reading kernel descriptor %s: %w", s.Name, err)
		}
		rsrc1 := binary.LittleEndian.Uint32(kd[kdRsrc1:])
		props := binary.LittleEndian.Uint16(kd[kdCodeProps:])
		seen[name] = true
		obj.Kernels = append(obj.Kernels, Kernel{
			Name:         name,
			RoundF32:     int(rsrc1>>roundShift32) & 3,
			RoundF16F64:  int(rsrc1>>roundShift16_64) & 3,
			DenormF32:    int(rsrc1>>denormShift32) & 3,
			DenormF16F64: int(rsrc1>>denormShift1664) & 3,
			Wave32:       props&wave32Bit != 0,
		})
	}
	sort.Slice(obj.Kernels, func(i, j int) bool { return obj.Kernels[i].Name < obj.Kernels[j].Name })
	return obj, nil
}
