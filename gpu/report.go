package gpu

import (
	"fmt"
	"io"
	"strings"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// Report is what `ctxproxy gpu` and the status page show: the devices and,
// for a model, the num_ctx it would get. Its JSON form is the external
// contract of `ctxproxy gpu --json` (README, Commands): {"devices": [{"vendor",
// "name", "total", "used", "free"}], "model": {"name", "bytes_per_token",
// "num_ctx", "reason"}}, bytes as integers.
type Report struct {
	Devices []Device     `json:"devices"`
	Model   *ModelReport `json:"model,omitempty"`
	// Source says whose view this is: "here" (probed by this command) or
	// the running ctxproxy it asked.
	Source string `json:"source,omitempty"`
	// Servers are the servers behind the ctxproxy asked, when it has
	// several: where each one's memory is read, and its last reading.
	Servers []ServerMemory `json:"servers,omitempty"`

	// Shown in the text form only.
	Probe string  `json:"-"`
	Err   string  `json:"-"`
	Level Level   `json:"-"`
	Usage float64 `json:"-"`
	// ModelMemory is what Ollama's loaded models hold; -1 when unknown.
	ModelMemory int64 `json:"-"`
}

// ModelReport is a Decision as Report shows it.
type ModelReport struct {
	Name          string `json:"name"`
	BytesPerToken uint64 `json:"bytes_per_token"`
	NumCtx        int    `json:"num_ctx"`
	Reason        string `json:"reason"`
}

// ServerMemory is one server's memory in a Report.
type ServerMemory struct {
	Name string `json:"name"`
	// Memory is where it is read: "local", "none", "ctxproxy at <URL>".
	Memory string `json:"memory"`
	Up     bool   `json:"up"`
	// GPU is its last reading; nil while none is known.
	GPU *adminapi.GPUStatus `json:"gpu,omitempty"`
}

// NewReport builds a Report from a Reading and, when d is not nil, the
// decision for a model.
func NewReport(snap Reading, d *Decision) Report {
	r := Report{
		Devices:     append([]Device{}, snap.Devices...), // [] rather than null in JSON
		Probe:       snap.Probe,
		Level:       snap.Level,
		Usage:       snap.Usage(),
		ModelMemory: -1,
	}
	if snap.ModelsKnown {
		r.ModelMemory = int64(snap.ModelMemory())
	}
	if snap.Err != nil {
		r.Err = snap.Err.Error()
	}
	if d != nil {
		r.Model = &ModelReport{Name: d.Model, BytesPerToken: d.BytesPerToken, NumCtx: d.NumCtx, Reason: d.Reason}
	}
	return r
}

// WriteText writes the readable form: a table of devices with sizes in
// GiB, then the model's sizing.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	usage := "unknown"
	if len(r.Devices) > 0 {
		usage = fmt.Sprintf("%.0f%%", r.Usage*100)
	}
	fmt.Fprintf(&b, "probe %s, memory guard %s (usage %s)", orDash(r.Probe), r.Level, usage)
	if r.ModelMemory >= 0 {
		fmt.Fprintf(&b, ", loaded models %s", gib(uint64(r.ModelMemory)))
	}
	b.WriteString("\n")
	if r.Source != "" {
		fmt.Fprintf(&b, "source: %s\n", r.Source)
	}
	if r.Err != "" {
		fmt.Fprintf(&b, "error: %s\n", r.Err)
	}
	rows := [][]string{{"VENDOR", "NAME", "TOTAL", "USED", "FREE"}}
	var total, used, free uint64
	for _, d := range r.Devices {
		rows = append(rows, []string{d.Vendor, d.Name, gib(d.Total), gib(d.Used), gib(d.Free)})
		total, used, free = total+d.Total, used+d.Used, free+d.Free
	}
	if len(r.Devices) > 1 {
		rows = append(rows, []string{"", "total", gib(total), gib(used), gib(free)})
	}
	if len(r.Devices) == 0 {
		b.WriteString("no devices\n")
	} else {
		writeTable(&b, rows, []bool{false, false, true, true, true})
	}
	if len(r.Servers) > 0 {
		b.WriteString("\nbackends\n")
		writeServers(&b, r.Servers)
	}
	if m := r.Model; m != nil {
		bpt := "unknown"
		if m.BytesPerToken > 0 {
			bpt = fmt.Sprintf("%d (%s)", m.BytesPerToken, formatBytes(m.BytesPerToken))
		}
		numCtx := "not set"
		if m.NumCtx > 0 {
			numCtx = fmt.Sprint(m.NumCtx)
		}
		b.WriteString("\n")
		writeTable(&b, [][]string{
			{"model", m.Name},
			{"bytes per token", bpt},
			{"num_ctx", numCtx},
			{"reason", m.Reason},
		}, []bool{false, false})
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeServers writes a table of each server's memory.
func writeServers(b *strings.Builder, servers []ServerMemory) {
	rows := [][]string{{"NAME", "STATE", "MEMORY", "PROBE", "GUARD", "TOTAL", "USED", "FREE"}}
	for _, s := range servers {
		state := "up"
		if !s.Up {
			state = "down"
		}
		row := []string{s.Name, state, s.Memory, "-", "-", "-", "-", "-"}
		if g := s.GPU; g != nil {
			row = []string{s.Name, state, s.Memory, orDash(g.Probe), orDash(g.Level), gib(g.Total), gib(g.Used), gib(g.Free)}
		}
		rows = append(rows, row)
	}
	writeTable(b, rows, []bool{false, false, false, false, false, true, true, true})
}

// writeTable writes rows in columns two spaces apart, right-aligning the
// columns marked in right, with no trailing spaces.
func writeTable(b *strings.Builder, rows [][]string, right []bool) {
	widths := make([]int, len(right))
	for _, row := range rows {
		for i, cell := range row {
			widths[i] = max(widths[i], len([]rune(cell)))
		}
	}
	for _, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", widths[i]-len([]rune(cell)))
			if right[i] {
				line.WriteString(pad + cell)
			} else {
				line.WriteString(cell + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
}

func gib(n uint64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
