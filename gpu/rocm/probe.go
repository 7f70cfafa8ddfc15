package rocm

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/detcoll/detcoll/internal/hip"
	"github.com/detcoll/detcoll/internal/hiprtc"
	"github.com/detcoll/detcoll/internal/probefmt"
	"github.com/detcoll/detcoll/internal/rccl"
)

// ArchEnv overrides the gcnArchName of every device (e.g. gfx942), for a
// runtime whose hipDeviceProp_t layout detcoll does not know.
const ArchEnv = "DETCOLL_HIP_ARCH"

// Info is what Probe found. Empty strings mean "not found"; the *Error
// fields say why.
type Info struct {
	HIPVersion    string   `json:"hip_version,omitempty"` // runtime, e.g. "6.4.43483"
	HIPLibrary    string   `json:"hip_library,omitempty"`
	HIPError      string   `json:"hip_error,omitempty"` // no runtime, or hipInit failed (no GPU)
	HiprtcVersion string   `json:"hiprtc_version,omitempty"`
	HiprtcLibrary string   `json:"hiprtc_library,omitempty"`
	HiprtcError   string   `json:"hiprtc_error,omitempty"`
	HiprtcTargets []string `json:"hiprtc_targets,omitempty"` // processors comgr can compile for
	ComgrLibrary  string   `json:"comgr_library,omitempty"`
	RCCLVersion   string   `json:"rccl_version,omitempty"`
	RCCLLibrary   string   `json:"rccl_library,omitempty"`
	RCCLError     string   `json:"rccl_error,omitempty"`
	IPC           bool     `json:"ipc"` // the runtime exports hipIpc{Get,Open,Close}MemHandle and the event calls
	GPUs          []GPU    `json:"gpus"`
	PeerAccess    [][]bool `json:"peer_access,omitempty"`
	Errors        []string `json:"errors,omitempty"`
}

// GPU describes one device.
type GPU struct {
	Ordinal         int    `json:"ordinal"`
	Name            string `json:"name"`
	GCNArchName     string `json:"gcn_arch_name"` // e.g. gfx942:sramecc+:xnack-
	Processor       string `json:"processor"`     // e.g. gfx942: the hiprtc target
	Compilable      bool   `json:"compilable"`    // the loaded hiprtc knows Processor
	WarpSize        int    `json:"warp_size"`
	TotalMemory     uint64 `json:"total_memory_bytes"`
	ComputeUnits    int    `json:"compute_units"`
	PCIBusID        string `json:"pci_bus_id,omitempty"`
	PropertiesVia   string `json:"properties_via,omitempty"`
	Error           string `json:"error,omitempty"`
	ArchFromEnviron bool   `json:"arch_from_environment,omitempty"`
}

// Target is the gcnArchName to compile for on device d: $DETCOLL_HIP_ARCH
// when set, else the device's own (hip.Device.Properties).
func Target(d hip.Device) (string, bool, error) {
	if v := strings.TrimSpace(os.Getenv(ArchEnv)); v != "" {
		if _, _, err := hiprtc.ParseTargetID(v); err != nil {
			return "", true, fmt.Errorf("$%s: %w", ArchEnv, err)
		}
		return v, true, nil
	}
	p, err := d.Properties()
	if err != nil {
		return "", false, fmt.Errorf("%w (set $%s=gfx… to name the target)", err, ArchEnv)
	}
	return p.GCNArchName, false, nil
}

// Probe inspects the HIP runtime, hiprtc, RCCL and the GPUs. It never
// fails: what could not be found is reported in the *Error fields.
func Probe() Info {
	var info Info
	if err := hip.Load(); err != nil {
		info.HIPError = "no HIP runtime: " + err.Error()
	} else {
		info.HIPLibrary = hip.LibraryPath()
		if v, err := hip.RuntimeVersion(); err == nil {
			info.HIPVersion = hip.VersionString(v)
		}
		info.IPC = hip.IPCAvailable() == nil
		if err := hip.Init(); err != nil {
			info.HIPError = "no usable AMD GPU: " + err.Error()
		}
	}
	if err := hiprtc.Available(); err != nil {
		info.HiprtcError = "no hiprtc: " + err.Error()
	} else {
		info.HiprtcLibrary = hiprtc.LibraryPath()
		info.HiprtcVersion = hiprtc.VersionString()
		if t, err := hiprtc.SupportedTargets(); err == nil {
			info.HiprtcTargets = t
			info.ComgrLibrary = hiprtc.ComgrPath()
		} else {
			info.Errors = append(info.Errors, "comgr (target list): "+err.Error())
		}
	}
	l, err := rccl.Default()
	info.RCCLVersion, info.RCCLLibrary, info.RCCLError = probefmt.Library("RCCL", err, l.Path, func() (string, error) {
		v, err := l.Version()
		return v.String(), err
	})
	if hip.Available() == nil {
		probeGPUs(&info)
	}
	return info
}

func probeGPUs(info *Info) {
	n, err := hip.DeviceCount()
	if err != nil {
		info.Errors = append(info.Errors, err.Error())
		return
	}
	if n == 0 {
		info.Errors = append(info.Errors, "the HIP runtime sees no GPU")
	}
	for i := 0; i < n; i++ {
		d := hip.Device(i)
		g := GPU{Ordinal: i}
		var errs probefmt.Errs
		g.Name, err = d.Name()
		errs.Note(err)
		g.WarpSize, err = d.WarpSize()
		errs.Note(err)
		g.TotalMemory, err = d.TotalMem()
		errs.Note(err)
		g.ComputeUnits, err = d.Attribute(hip.AttrMultiprocessorCount)
		errs.Note(err)
		if id, err := d.PCIBusID(); err == nil {
			g.PCIBusID = id
		}
		if p, err := d.Properties(); err == nil {
			g.PropertiesVia = p.Layout
		}
		target, env, err := Target(d)
		errs.Note(err)
		g.GCNArchName, g.ArchFromEnviron = target, env
		if target != "" {
			if proc, _, err := hiprtc.ParseTargetID(target); err == nil {
				g.Processor = proc
				g.Compilable = hiprtc.Available() == nil && hiprtc.CheckTarget(proc) == nil
			}
		}
		g.Error = errs.String()
		info.GPUs = append(info.GPUs, g)
	}
	if n > 1 {
		var errs []string
		info.PeerAccess, errs = probefmt.PeerAccess(n, func(i, j int) (bool, error) { return hip.Device(i).CanAccessPeer(hip.Device(j)) })
		info.Errors = append(info.Errors, errs...)
	}
}

// String is a human-readable report (the ROCm section of `detcoll env`).
func (i Info) String() string {
	var b strings.Builder
	line := func(k, v, lib, e string) { probefmt.VersionLine(&b, k, v, lib, e) }
	hipErr := i.HIPError
	if i.HIPVersion != "" {
		line("HIP runtime", i.HIPVersion, i.HIPLibrary, "")
		if hipErr != "" {
			probefmt.Field(&b, "", hipErr)
		}
	} else {
		line("HIP runtime", "", "", hipErr)
	}
	line("hiprtc", i.HiprtcVersion, i.HiprtcLibrary, i.HiprtcError)
	if len(i.HiprtcTargets) > 0 {
		probefmt.Field(&b, "hiprtc targets", strings.Join(i.HiprtcTargets, " "))
	}
	line("RCCL", i.RCCLVersion, i.RCCLLibrary, i.RCCLError)
	if i.HIPVersion != "" {
		ipc := "no"
		if i.IPC {
			ipc = "yes (hipIpc*MemHandle, hipIpc*EventHandle)"
		}
		probefmt.Field(&b, "HIP IPC calls", ipc)
	}
	probefmt.Field(&b, "AMD GPUs", strconv.Itoa(len(i.GPUs)))
	for _, g := range i.GPUs {
		fmt.Fprintf(&b, "  %d: %s, %s, wavefront %d, %.1f GiB, %d CUs, %s", g.Ordinal, g.Name, g.GCNArchName, g.WarpSize,
			float64(g.TotalMemory)/(1<<30), g.ComputeUnits, g.PCIBusID)
		if g.Processor != "" && !g.Compilable {
			fmt.Fprintf(&b, " (hiprtc cannot compile for %s)", g.Processor)
		}
		if g.Error != "" {
			fmt.Fprintf(&b, " (error: %s)", g.Error)
		}
		b.WriteByte('\n')
	}
	probefmt.Tail(&b, i.PeerAccess, i.Errors)
	return b.String()
}
