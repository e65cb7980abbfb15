//go:build !darwin

package gpu

import "errors"

// hostSysctl has nothing to read outside darwin.
type hostSysctl struct{}

var errNoSysctl = errors.New("sysctl: only on darwin")

func (hostSysctl) Uint(string) (uint64, error)   { return 0, errNoSysctl }
func (hostSysctl) String(string) (string, error) { return "", errNoSysctl }
