package cudart

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/detcoll/detcoll/internal/cuda"
	"github.com/detcoll/detcoll/internal/nccl"
	"github.com/detcoll/detcoll/internal/nvrtc"
	"github.com/detcoll/detcoll/internal/probefmt"
)

// Info is what Probe found. Empty strings mean "not found"; the *Error
// fields say why.
type Info struct {
	DriverVersion string    `json:"driver_version,omitempty"` // NVIDIA kernel driver, e.g. "580.65.06"
	CUDAVersion   string    `json:"cuda_version,omitempty"`   // CUDA version the driver supports, e.g. "13.0"
	CUDALibrary   string    `json:"cuda_library,omitempty"`
	CUDAError     string    `json:"cuda_error,omitempty"`
	NVRTCVersion  string    `json:"nvrtc_version,omitempty"`
	NVRTCLibrary  string    `json:"nvrtc_library,omitempty"`
	NVRTCError    string    `json:"nvrtc_error,omitempty"`
	NCCLVersion   string    `json:"nccl_version,omitempty"`
	NCCLLibrary   string    `json:"nccl_library,omitempty"`
	NCCLError     string    `json:"nccl_error,omitempty"`
	GPUs          []GPUInfo `json:"gpus"`
	// PeerAccess[i][j] reports whether GPU i can access GPU j's memory
	// (cuDeviceCanAccessPeer; the diagonal is true).
	PeerAccess [][]bool `json:"peer_access,omitempty"`
	Errors     []string `json:"errors,omitempty"`
}

// GPUInfo describes one device.
type GPUInfo struct {
	Ordinal           int    `json:"ordinal"`
	Name              string `json:"name"`
	ComputeCapability string `json:"compute_capability"` // "9.0"
	TotalMemory       uint64 `json:"total_memory_bytes"`
	Multiprocessors   int    `json:"multiprocessors"`
	PCIBusID          string `json:"pci_bus_id,omitempty"`
	UUID              string `json:"uuid,omitempty"`
	Error             string `json:"error,omitempty"`
}

// Probe inspects the CUDA driver, NVRTC, NCCL and the GPUs without
// creating any context. It never fails: what could not be found is
// reported in the *Error fields ("no CUDA driver: …" on a machine without
// one).
func Probe() Info {
	var info Info
	info.DriverVersion = kernelDriverVersion()
	if err := cuda.Available(); err != nil {
		info.CUDAError = "no CUDA driver: " + err.Error()
	} else {
		info.CUDALibrary = cuda.LibraryPath()
		if v, err := cuda.DriverVersion(); err == nil {
			info.CUDAVersion = cuda.VersionString(v)
		} else {
			info.Errors = append(info.Errors, err.Error())
		}
		probeGPUs(&info)
	}
	info.NVRTCVersion, info.NVRTCLibrary, info.NVRTCError = probefmt.Library("NVRTC", nvrtc.Available(), nvrtc.LibraryPath,
		func() (string, error) { return nvrtc.VersionString(), nil })
	l, err := nccl.Default()
	info.NCCLVersion, info.NCCLLibrary, info.NCCLError = probefmt.Library("NCCL", err, l.Path, func() (string, error) {
		v, err := l.Version()
		return v.String(), err
	})
	return info
}

func probeGPUs(info *Info) {
	n, err := cuda.DeviceCount()
	if err != nil {
		info.Errors = append(info.Errors, err.Error())
		return
	}
	if n == 0 {
		info.Errors = append(info.Errors, "the CUDA driver sees no GPU")
	}
	devs := make([]cuda.Device, n)
	for i := 0; i < n; i++ {
		g := GPUInfo{Ordinal: i}
		d, err := cuda.DeviceGet(i)
		if err != nil {
			g.Error = err.Error()
			info.GPUs = append(info.GPUs, g)
			continue
		}
		devs[i] = d
		var errs probefmt.Errs
		g.Name, err = d.Name()
		errs.Note(err)
		ma, mi, err := d.ComputeCapability()
		errs.Note(err)
		g.ComputeCapability = fmt.Sprintf("%d.%d", ma, mi)
		g.TotalMemory, err = d.TotalMem()
		errs.Note(err)
		g.Multiprocessors, err = d.Attribute(cuda.AttrMultiprocessorCount)
		errs.Note(err)
		if id, err := d.PCIBusID(); err == nil {
			g.PCIBusID = id
		}
		if u, err := d.UUID(); err == nil {
			g.UUID = formatUUID(u)
		}
		g.Error = errs.String()
		info.GPUs = append(info.GPUs, g)
	}
	if n > 0 {
		var errs []string
		info.PeerAccess, errs = probefmt.PeerAccess(n, func(i, j int) (bool, error) { return devs[i].CanAccessPeer(devs[j]) })
		info.Errors = append(info.Errors, errs...)
	}
}

func formatUUID(u [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// kernelDriverVersion reads the NVIDIA kernel module version on Linux.
func kernelDriverVersion() string {
	b, err := os.ReadFile("/proc/driver/nvidia/version")
	if err != nil {
		return ""
	}
	return parseDriverVersion(string(b))
}

// parseDriverVersion extracts "580.65.06" from /proc/driver/nvidia/version
// ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul ...").
func parseDriverVersion(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	for _, w := range strings.Fields(line) {
		if isVersion(w) {
			return w
		}
	}
	return ""
}

func isVersion(w string) bool {
	dots := 0
	for i, c := range w {
		switch {
		case c == '.':
			if i == 0 || i == len(w)-1 || w[i-1] == '.' {
				return false
			}
			dots++
		case c < '0' || c > '9':
			return false
		}
	}
	return dots >= 1
}

// String is a human-readable report (for `detcoll env`).
func (i Info) String() string {
	var b strings.Builder
	probefmt.Line(&b, "NVIDIA driver", i.DriverVersion, "")
	probefmt.VersionLine(&b, "CUDA driver", i.CUDAVersion, i.CUDALibrary, i.CUDAError)
	// NVRTC and NCCL name their path whenever they have a version (an empty
	// path shows as "()": the report has always read so).
	withPath := func(v, path string) string {
		if v != "" {
			v += " (" + path + ")"
		}
		return v
	}
	probefmt.Line(&b, "NVRTC", withPath(i.NVRTCVersion, i.NVRTCLibrary), i.NVRTCError)
	probefmt.Line(&b, "NCCL", withPath(i.NCCLVersion, i.NCCLLibrary), i.NCCLError)
	probefmt.Field(&b, "GPUs", strconv.Itoa(len(i.GPUs)))
	for _, g := range i.GPUs {
		fmt.Fprintf(&b, "  %d: %s, cc %s, %.1f GiB, %d SMs, %s %s", g.Ordinal, g.Name, g.ComputeCapability,
			float64(g.TotalMemory)/(1<<30), g.Multiprocessors, g.PCIBusID, g.UUID)
		if g.Error != "" {
			fmt.Fprintf(&b, " (error: %s)", g.Error)
		}
		b.WriteByte('\n')
	}
	probefmt.Tail(&b, i.PeerAccess, i.Errors)
	return b.String()
}
