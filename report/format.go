package report

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Clean replaces control characters in text from the network (session
// ids, model names, messages), so none can drive the terminal.
func Clean(s string) string {
	if strings.IndexFunc(s, notPrintable) < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if notPrintable(r) {
			return '?'
		}
		return r
	}, s)
}

func notPrintable(r rune) bool { return r != ' ' && !unicode.IsPrint(r) }

// Grouped writes n with thousands separators: 131072 → "131,072".
func Grouped(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Percent writes a fraction as a percentage with the given decimals.
func Percent(f float64, decimals int) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		f = 0
	}
	return strconv.FormatFloat(f*100, 'f', decimals, 64) + "%"
}

// BytesIEC writes a byte count in binary units: "512.0 MiB", "24.0 GiB".
func BytesIEC(n float64) string {
	if n < 1024 {
		return strconv.FormatFloat(n, 'f', 0, 64) + " B"
	}
	for i, unit := range []string{"KiB", "MiB", "GiB", "TiB"} {
		n /= 1024
		if n < 1024 || i == 3 {
			return strconv.FormatFloat(n, 'f', 1, 64) + " " + unit
		}
	}
	panic("unreachable")
}

// gib writes a pair of byte counts in GiB: "5.1/24.0 GiB".
func gib(used, total uint64, sep string) string {
	const g = 1 << 30
	return fmt.Sprintf("%.1f%s%.1f GiB", float64(used)/g, sep, float64(total)/g)
}

// ratio is a/b, 0 when b is 0.
func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

// Plural writes a count and its noun: "1 message", "2 messages".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return Grouped(n) + " " + noun + "s"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// MetadataLine writes metadata as key=value pairs, sorted by key; values
// that are not strings as JSON.
func MetadataLine(m map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		val, ok := m[k].(string)
		if !ok {
			data, err := json.Marshal(m[k])
			if err != nil {
				data = []byte(fmt.Sprint(m[k]))
			}
			val = string(data)
		}
		parts = append(parts, Clean(k)+"="+Clean(val))
	}
	return strings.Join(parts, ", ")
}

// usage shows a conversation's usage of the window, with ⚠ from WarnAt;
// when ctxproxy cut it, as two numbers, each named: "3,200 as sent /
// 1,900 (168.4%); 1,100 forwarded (57.9%)". The ⚠ follows what the model
// saw, so a conversation cut to fit is not flagged for what it was before.
func (p Palette) usage(asSent, forwarded, limit int) string {
	pct := func(n int) float64 { return ratio(float64(n), float64(limit)) }
	seen := asSent
	line := fmt.Sprintf("%s / %s (%s)", Grouped(asSent), Grouped(limit), Percent(pct(asSent), 1))
	if forwarded > 0 && forwarded != asSent {
		seen = forwarded
		line = fmt.Sprintf("%s as sent / %s (%s); %s forwarded (%s)", Grouped(asSent), Grouped(limit),
			Percent(pct(asSent), 1), Grouped(forwarded), Percent(pct(forwarded), 1))
	}
	if u := pct(seen); u >= WarnAt {
		line += " " + p.Paint(UsageColor(u), "⚠")
	}
	return line
}
