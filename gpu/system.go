package gpu

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/shirou/gopsutil/v4/mem"
)

// System measures system RAM, for CPU-only inference.
//
// Inside a container gopsutil reports the host's memory, while the kernel
// kills the container at its cgroup limit; so the device is the tighter of
// the host and the cgroup (v2 memory.max/memory.current, v1
// memory.limit_in_bytes/memory.usage_in_bytes), walking from the process's
// own cgroup up to the root since a parent's limit binds too.
type System struct {
	root fs.FS
	host func(ctx context.Context) (total, available uint64, err error)
}

// NewSystem returns the system RAM probe reading cgroup files under root
// (nil means the real "/").
func NewSystem(root fs.FS) *System {
	if root == nil {
		root = os.DirFS("/")
	}
	return &System{root: root, host: hostMemory}
}

func hostMemory(ctx context.Context) (total, available uint64, err error) {
	v, err := mem.VirtualMemoryWithContext(ctx)
	if err != nil {
		return 0, 0, err
	}
	return v.Total, v.Available, nil
}

// Name returns "cpu".
func (p *System) Name() string { return ProbeCPU }

// Close does nothing.
func (p *System) Close() error { return nil }

// Devices reports system RAM, limited by the cgroup, as one device.
func (p *System) Devices(ctx context.Context) ([]Device, error) {
	total, avail, err := p.host(ctx)
	if err != nil {
		return nil, fmt.Errorf("gpu: system memory: %w", err)
	}
	d := newDevice(ProbeCPU, "system RAM", total, avail)
	if cg, ok := p.cgroup(); ok && (cg.Total < d.Total || cg.Free < d.Free) {
		d = newDevice(ProbeCPU, "system RAM (cgroup limit)", min(cg.Total, d.Total), min(cg.Free, d.Free))
	}
	return []Device{d}, nil
}

// cgroupMemory is the tightest cgroup limit found and its free memory.
type cgroupMemory struct{ Total, Free uint64 }

// noLimit is where a cgroup v1 limit means "unlimited" (the kernel writes
// PAGE_COUNTER_MAX pages, 9223372036854771712 on 4 KiB pages).
const noLimit = 1 << 62

// cgroup finds the tightest memory limit over the process's cgroup and its
// ancestors, v2 first, then v1.
func (p *System) cgroup() (cgroupMemory, bool) {
	v2, v1 := p.selfCgroups()
	if m, ok := p.tightest("sys/fs/cgroup", v2, "memory.max", "memory.current", "inactive_file"); ok {
		return m, true
	}
	return p.tightest("sys/fs/cgroup/memory", v1, "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
}

// selfCgroups reads /proc/self/cgroup: the v2 path ("0::/path") and the v1
// memory controller's path ("N:memory:/path"). Missing entries are "/".
func (p *System) selfCgroups() (v2, v1 string) {
	v2, v1 = "/", "/"
	f, err := p.root.Open("proc/self/cgroup")
	if err != nil {
		return v2, v1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		id, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		controllers, cgPath, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		switch {
		case id == "0" && controllers == "":
			v2 = cgPath
		case containsField(controllers, "memory"):
			v1 = cgPath
		}
	}
	return v2, v1
}

func containsField(list, name string) bool {
	for f := range strings.SplitSeq(list, ",") {
		if f == name {
			return true
		}
	}
	return false
}

// tightest walks mount+cgPath up to mount and returns the limit that leaves
// the least memory free. Usage counts the working set: page cache that the
// kernel reclaims before it OOM-kills (inactive_file in memory.stat) is
// subtracted, as docker stats and the kubelet do.
func (p *System) tightest(mount, cgPath, limitFile, usageFile, inactiveKey string) (cgroupMemory, bool) {
	var best cgroupMemory
	found := false
	dir := path.Join(mount, path.Clean("/"+cgPath))
	for {
		if m, ok := p.level(dir, limitFile, usageFile, inactiveKey); ok && (!found || m.Free < best.Free) {
			best, found = m, true
		}
		if dir == mount || !strings.HasPrefix(dir, mount+"/") {
			break
		}
		dir = path.Dir(dir)
	}
	return best, found
}

func (p *System) level(dir, limitFile, usageFile, inactiveKey string) (cgroupMemory, bool) {
	s, err := readString(p.root, path.Join(dir, limitFile))
	if err != nil || s == "max" {
		return cgroupMemory{}, false
	}
	limit, err := strconv.ParseUint(s, 10, 64)
	if err != nil || limit == 0 || limit >= noLimit {
		return cgroupMemory{}, false
	}
	usage, err := readUint(p.root, path.Join(dir, usageFile))
	if err != nil {
		// A limit without usage still bounds the total.
		return cgroupMemory{Total: limit, Free: limit}, true
	}
	usage -= min(usage, statValue(p.root, path.Join(dir, "memory.stat"), inactiveKey))
	return cgroupMemory{Total: limit, Free: limit - min(usage, limit)}, true
}

// statValue reads one key of a memory.stat file; 0 when absent.
func statValue(fsys fs.FS, name, key string) uint64 {
	b, err := fs.ReadFile(fsys, name)
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}
