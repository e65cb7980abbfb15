//go:build darwin

package gpu

import "golang.org/x/sys/unix"

// hostSysctl reads sysctl(3).
type hostSysctl struct{}

// Uint reads a numeric value of 8 or 4 bytes (hw.memsize is 64-bit,
// iogpu.wired_limit_mb is an int).
func (hostSysctl) Uint(name string) (uint64, error) {
	if v, err := unix.SysctlUint64(name); err == nil {
		return v, nil
	}
	v, err := unix.SysctlUint32(name)
	return uint64(v), err
}

func (hostSysctl) String(name string) (string, error) { return unix.Sysctl(name) }
