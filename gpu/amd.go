package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Runner runs a command and returns its standard output. Probes that fall
// back to a vendor tool take one, so tests can answer for the tool.
type Runner func(ctx context.Context, name string, args ...string) ([]byte, error)

// execRunner runs the command if it is on PATH, with a short timeout: a
// wedged vendor tool must not stall sampling.
func execRunner(ctx context.Context, name string, args ...string) ([]byte, error) {
	bin, err := exec.LookPath(name)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, bin, args...).Output()
}

// amdVendorID is the PCI vendor id of AMD in sysfs.
const amdVendorID = "0x1002"

// amdMinVRAM filters out integrated GPUs, whose "VRAM" is a small carve-out
// of system RAM; Ollama's AMD discovery skipped GPUs under 1 GiB for the
// same reason.
const amdMinVRAM = 1 << 30

// AMD measures AMD GPUs through the amdgpu driver's sysfs files
// (card*/device/mem_info_vram_total and mem_info_vram_used), with
// `rocm-smi --showmeminfo vram --json` as a fallback.
type AMD struct {
	root fs.FS
	run  Runner
}

// NewAMD returns an AMD probe reading sysfs under root (nil means the real
// "/") and running rocm-smi through run (nil means exec).
func NewAMD(root fs.FS, run Runner) *AMD {
	if root == nil {
		root = os.DirFS("/")
	}
	if run == nil {
		run = execRunner
	}
	return &AMD{root: root, run: run}
}

// Name returns "amd".
func (p *AMD) Name() string { return ProbeAMD }

// Close does nothing.
func (p *AMD) Close() error { return nil }

// Devices reports each discrete AMD GPU's VRAM.
func (p *AMD) Devices(ctx context.Context) ([]Device, error) {
	devices, sysErr := p.sysfs()
	if len(devices) > 0 {
		return devices, nil
	}
	devices, smiErr := p.rocmSMI(ctx)
	if len(devices) > 0 {
		return devices, nil
	}
	return nil, fmt.Errorf("%w: no AMD GPU: sysfs: %v; rocm-smi: %v", ErrNoDevice, sysErr, smiErr)
}

const drmDir = "sys/class/drm"

func (p *AMD) sysfs() ([]Device, error) {
	entries, err := fs.ReadDir(p.root, drmDir)
	if err != nil {
		return nil, err
	}
	var cards []int
	for _, e := range entries {
		// card0, card1, …; not card0-DP-1 (a connector) or renderD128.
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "card"))
		if err == nil && strings.HasPrefix(e.Name(), "card") && n >= 0 {
			cards = append(cards, n)
		}
	}
	sort.Ints(cards)
	var devices []Device
	for _, n := range cards {
		dir := path.Join(drmDir, "card"+strconv.Itoa(n), "device")
		if v, _ := readString(p.root, path.Join(dir, "vendor")); v != "" && v != amdVendorID {
			continue
		}
		total, err := readUint(p.root, path.Join(dir, "mem_info_vram_total"))
		if err != nil || total < amdMinVRAM {
			continue
		}
		used, err := readUint(p.root, path.Join(dir, "mem_info_vram_used"))
		if err != nil {
			continue
		}
		name, _ := readString(p.root, path.Join(dir, "product_name"))
		if name == "" {
			name = fmt.Sprintf("AMD GPU (card%d)", n)
		}
		devices = append(devices, newDevice(ProbeAMD, name, total, total-min(used, total)))
	}
	if len(devices) == 0 {
		return nil, errors.New("no card with mem_info_vram_total")
	}
	return devices, nil
}

// rocmSMI parses `rocm-smi --showmeminfo vram --json`, whose answer is
// {"card0": {"VRAM Total Memory (B)": "…", "VRAM Total Used Memory (B)": "…"}}.
func (p *AMD) rocmSMI(ctx context.Context) ([]Device, error) {
	out, err := p.run(ctx, "rocm-smi", "--showmeminfo", "vram", "--json")
	if err != nil {
		return nil, err
	}
	var cards map[string]map[string]any
	if err := json.Unmarshal(out, &cards); err != nil {
		return nil, fmt.Errorf("rocm-smi output: %w", err)
	}
	names := make([]string, 0, len(cards))
	for name := range cards {
		if strings.HasPrefix(name, "card") {
			names = append(names, name)
		}
	}
	sort.Slice(names, func(i, j int) bool { return cardIndex(names[i]) < cardIndex(names[j]) })
	var devices []Device
	for _, name := range names {
		total, ok1 := jsonUint(cards[name]["VRAM Total Memory (B)"])
		used, ok2 := jsonUint(cards[name]["VRAM Total Used Memory (B)"])
		if !ok1 || !ok2 || total < amdMinVRAM {
			continue
		}
		devices = append(devices, newDevice(ProbeAMD, "AMD GPU ("+name+")", total, total-min(used, total)))
	}
	if len(devices) == 0 {
		return nil, errors.New("rocm-smi reported no VRAM")
	}
	return devices, nil
}

func cardIndex(name string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "card"))
	if err != nil {
		return 1 << 30
	}
	return n
}

// jsonUint reads a byte count that rocm-smi writes as a string (or a
// number in some versions).
func jsonUint(v any) (uint64, bool) {
	switch v := v.(type) {
	case string:
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		return n, err == nil
	case float64:
		if v < 0 || v > 1<<63 {
			return 0, false
		}
		return uint64(v), true
	}
	return 0, false
}

// readString reads a small sysfs or cgroup file, trimmed.
func readString(fsys fs.FS, name string) (string, error) {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// readUint reads a file holding one unsigned decimal number.
func readUint(fsys fs.FS, name string) (uint64, error) {
	s, err := readString(fsys, name)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(s, 10, 64)
}
