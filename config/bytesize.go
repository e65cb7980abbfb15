package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// ByteSize is a size in bytes that config files may write as "32MiB",
// "512MB", "1GiB" or a plain number.
type ByteSize int64

var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"k": 1 << 10, "kb": 1000, "kib": 1 << 10,
	"m": 1 << 20, "mb": 1000 * 1000, "mib": 1 << 20,
	"g": 1 << 30, "gb": 1000 * 1000 * 1000, "gib": 1 << 30,
	"t": 1 << 40, "tb": 1000 * 1000 * 1000 * 1000, "tib": 1 << 40,
}

// ParseByteSize parses "32MiB", "1.5GB", "4096".
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	n, err := strconv.ParseFloat(t[:i], 64)
	unit, ok := sizeUnits[strings.ToLower(strings.TrimSpace(t[i:]))]
	if err != nil || !ok || n < 0 {
		return 0, fmt.Errorf("%q is not a size (use e.g. 512MiB, 32MB, 1GiB or a number of bytes)", s)
	}
	return ByteSize(n * float64(unit)), nil
}

// String formats the size with the largest binary unit that divides it.
func (b ByteSize) String() string {
	for _, u := range []struct {
		name string
		n    int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && int64(b)%u.n == 0 {
			return fmt.Sprintf("%d%s", int64(b)/u.n, u.name)
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

func byteSizeHook(_ reflect.Type, to reflect.Type, data any) (any, error) {
	if to != reflect.TypeFor[ByteSize]() {
		return data, nil
	}
	switch v := data.(type) {
	case string:
		return ParseByteSize(v)
	case int:
		return ByteSize(v), nil
	case int64:
		return ByteSize(v), nil
	case float64:
		return ByteSize(v), nil
	case ByteSize:
		return v, nil
	}
	return data, nil
}
