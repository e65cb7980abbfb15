package report

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// Printer is how things are shown: colors, and the zone times are in.
type Printer struct {
	Palette
	// Loc is where times are shown (nil: UTC). Zone appends the zone's
	// name, for readers who may be elsewhere (the in-band replies).
	Loc  *time.Location
	Zone bool
}

// When writes a time, "-" for the zero time.
func (p Printer) When(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	layout := time.DateTime
	if p.Zone {
		layout += " MST"
	}
	return t.In(cmp.Or(p.Loc, time.UTC)).Format(layout)
}

// table is a tabwriter for aligned columns.
func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// Facts is what a context status shows: the proxy's status, the session
// and the model the user talks to. A part that could not be fetched is
// nil; Head, from the last reply's headers, fills in for the session.
type Facts struct {
	Model string
	// SessionID names the session even when Session could not be
	// fetched (nothing stored in it yet).
	SessionID string
	Status    *adminapi.Status
	Session   *adminapi.SessionDetail
	Head      *adminapi.Headers
}

// ModelName is the model asked about, or the session's.
func (f Facts) ModelName() string {
	if f.Model != "" {
		return f.Model
	}
	if f.Session != nil {
		return f.Session.Model
	}
	return ""
}

// tokens returns the conversation's tokens as sent and as forwarded, the
// effective limit and the usage fraction.
func (f Facts) tokens() (tokens, sent, limit int, usage float64, ok bool) {
	switch {
	case f.Session != nil:
		st := f.Session.Stats
		usage = st.Usage
		if usage == 0 {
			usage = ratio(float64(st.Tokens), float64(st.Limit))
		}
		return st.Tokens, st.Sent, st.Limit, usage, true
	case f.Head != nil && f.Head.Seen && f.Head.Limit > 0:
		return f.Head.Tokens, 0, f.Head.Limit, f.Head.Usage / 100, true
	}
	return 0, 0, 0, 0, false
}

func (f Facts) modelStatus() (adminapi.ModelStatus, bool) {
	if f.Status == nil {
		return adminapi.ModelStatus{}, false
	}
	return f.Status.Model(f.ModelName())
}

// memoryLabel is "VRAM", or "RAM" when ctxproxy sizes from system memory.
func (f Facts) memoryLabel() string {
	if f.Status != nil && f.Status.GPU.Probe == "cpu" {
		return "RAM"
	}
	return "VRAM"
}

func (f Facts) memoryUsage() float64 {
	g := f.Status.GPU
	if g.Usage > 0 {
		return g.Usage
	}
	return ratio(float64(g.Used), float64(g.Total))
}

// memoryLine is "5.0 / 24.0 GiB (20.8%)", or "unknown".
func (f Facts) memoryLine() string {
	g := f.Status.GPU
	if g.Total == 0 {
		return "unknown"
	}
	return fmt.Sprintf("%s (%s)", gib(g.Used, g.Total, " / "), Percent(f.memoryUsage(), 1))
}

// autoCompress says whether ctxproxy trims or summarizes by itself, and
// from what usage.
func (f Facts) autoCompress() (on bool, threshold float64) {
	s := f.Status.Strategy
	return s.Mode != "" && s.Mode != "none", s.Threshold
}

// StatusBar is the one line shown after each reply: ContextStatus's
// fields in short, with ⚠ from WarnAt.
func StatusBar(p Palette, f Facts) string {
	var parts []string
	if m := f.ModelName(); m != "" {
		parts = append(parts, Clean(m))
	}
	warn := ""
	if tokens, sent, limit, usage, ok := f.tokens(); ok {
		if sent > 0 && sent != tokens {
			// Cut to fit: what the model saw is what fills the window.
			usage = ratio(float64(sent), float64(limit))
			parts = append(parts, fmt.Sprintf("%s sent → %s/%s tokens forwarded (%s)", Grouped(tokens), Grouped(sent),
				Grouped(limit), Percent(usage, 0)))
		} else {
			parts = append(parts, fmt.Sprintf("%s/%s tokens (%s)", Grouped(tokens), Grouped(limit), Percent(usage, 0)))
		}
		if usage >= WarnAt {
			warn = p.Paint(UsageColor(usage), "⚠")
		}
	}
	if f.Status != nil {
		if f.Status.GPU.Total > 0 {
			parts = append(parts, fmt.Sprintf("%s %s (%s)", f.memoryLabel(),
				gib(f.Status.GPU.Used, f.Status.GPU.Total, "/"), Percent(f.memoryUsage(), 0)))
		}
		if q := f.Status.Context.KVQuantization; q != "" {
			parts = append(parts, Clean(q))
		}
	}
	if f.Session != nil {
		parts = append(parts, Plural(f.Session.Snapshots, "snapshot"))
	}
	if f.Status != nil {
		if on, threshold := f.autoCompress(); on {
			parts = append(parts, "auto-compress at "+Percent(threshold, 0))
		} else {
			parts = append(parts, "auto-compress off")
		}
	}
	if len(parts) == 0 {
		return ""
	}
	bar := p.Paint(Dim, strings.Join(parts, " · "))
	if warn != "" {
		bar = warn + " " + bar
	}
	return bar
}

// ContextStatus is /context and "ctxproxy context status --session":
// the model, tokens, memory, KV cache, snapshots, auto-compression and
// context size, then the session's warning.
func ContextStatus(w io.Writer, p Printer, f Facts) error {
	tw := table(w)
	if id := cmp.Or(f.SessionID, sessionID(f.Session)); id != "" {
		fmt.Fprintf(tw, "Session\t%s\n", Clean(id))
	}
	fmt.Fprintf(tw, "Model\t%s\n", Clean(orDash(f.ModelName())))
	m, haveModel := f.modelStatus()
	tokens, sent, limit, _, haveTokens := f.tokens()
	switch {
	case haveTokens:
		fmt.Fprintf(tw, "Tokens\t%s\n", p.usage(tokens, sent, limit))
	case haveModel && m.Effective > 0:
		fmt.Fprintf(tw, "Tokens\t0 / %s (0.0%%)\n", Grouped(m.Effective))
	default:
		fmt.Fprintf(tw, "Tokens\tunknown\n")
	}
	if f.Status != nil {
		fmt.Fprintf(tw, "%s\t%s\n", f.memoryLabel(), f.memoryLine())
		kv := Clean(f.Status.Context.KVQuantization)
		if haveModel && m.BytesPerToken > 0 && haveTokens {
			kv += fmt.Sprintf(", %s (%s tokens × %s)", BytesIEC(float64(tokens)*float64(m.BytesPerToken)),
				Grouped(tokens), BytesIEC(float64(m.BytesPerToken)))
		} else {
			kv += ", memory unknown (the model's size per token is not known yet)"
		}
		fmt.Fprintf(tw, "KV cache\t%s\n", kv)
	}
	switch {
	case f.Session != nil:
		fmt.Fprintf(tw, "Snapshots\t%s\n", Grouped(f.Session.Snapshots))
	case f.SessionID != "":
		fmt.Fprintf(tw, "Snapshots\t0 (nothing stored in this session yet)\n")
	}
	if f.Status != nil {
		fmt.Fprintf(tw, "Auto-compress\t%s\n", compressLine(f.Status.Strategy))
		fmt.Fprintf(tw, "Context size\t%s\n", sizeLine(f))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if f.Session != nil && f.Session.Warning != "" {
		_, err := fmt.Fprintln(w, p.Warning(f.Session.Warning))
		return err
	}
	return nil
}

func sessionID(d *adminapi.SessionDetail) string {
	if d == nil {
		return ""
	}
	return d.SessionID
}

// compressLine is the strategy as auto-compression: "on at 80% (smart,
// down to 60%)", with the lower threshold memory pressure sets.
func compressLine(s adminapi.StrategyStatus) string {
	if s.Mode == "" || s.Mode == "none" {
		return "off"
	}
	line := fmt.Sprintf("on at %s (%s, down to %s)", Percent(s.Threshold, 0), Clean(s.Mode), Percent(s.Target, 0))
	if s.EffectiveThreshold > 0 && s.EffectiveThreshold != s.Threshold {
		line += fmt.Sprintf(", now %s for memory", Percent(s.EffectiveThreshold, 0))
	}
	return line
}

func sizeLine(f Facts) string {
	c := f.Status.Context
	line := "auto (from free VRAM)"
	if !c.Auto {
		line = "fixed at " + Grouped(c.TargetSize) + " tokens"
	}
	if m, ok := f.modelStatus(); ok && m.NumCtx > 0 {
		line += ", num_ctx " + Grouped(m.NumCtx)
	}
	return line
}

// requests is the session's request count with the backend's counts over
// all of them: "59 (5,427 prompt + 960 completion tokens in all)".
func requests(st adminapi.SessionStats) string {
	if st.AllPromptTokens == 0 && st.AllCompletionTokens == 0 {
		return Grouped(st.Requests)
	}
	return fmt.Sprintf("%s (%s prompt + %s completion tokens in all)", Grouped(st.Requests),
		Grouped(st.AllPromptTokens), Grouped(st.AllCompletionTokens))
}

// lastRequest is what the backend reported for the session's last
// request: "5,427 prompt + 16 completion tokens (as the backend counted)".
func lastRequest(st adminapi.SessionStats) string {
	if st.PromptTokens == 0 && st.CompletionTokens == 0 {
		return "no counts from the backend yet"
	}
	return fmt.Sprintf("%s prompt + %s completion tokens (as the backend counted)", Grouped(st.PromptTokens), Grouped(st.CompletionTokens))
}

// SessionStats is /stats and "ctxproxy context show": the session and its
// running token total.
func SessionStats(w io.Writer, p Printer, s adminapi.SessionDetail) error {
	tw := table(w)
	st := s.Stats
	fmt.Fprintf(tw, "Session\t%s\n", Clean(s.SessionID))
	fmt.Fprintf(tw, "Model\t%s\n", Clean(orDash(s.Model)))
	fmt.Fprintf(tw, "Messages\t%s\n", Grouped(s.Messages))
	fmt.Fprintf(tw, "Tokens\t%s\n", p.usage(st.Tokens, st.Sent, st.Limit))
	fmt.Fprintf(tw, "Requests\t%s\n", requests(st))
	fmt.Fprintf(tw, "Last request\t%s\n", lastRequest(st))
	fmt.Fprintf(tw, "Trimmed\t%s dropped, %s summarized\n", Plural(st.Dropped, "message"), Grouped(st.Summarized))
	if b := st.Budget; b != nil {
		fmt.Fprintf(tw, "Budget\t%s\n", BudgetLine(*b))
	}
	fmt.Fprintf(tw, "Snapshots\t%s\n", Grouped(s.Snapshots))
	fmt.Fprintf(tw, "Created\t%s\n", p.When(s.Created))
	fmt.Fprintf(tw, "Updated\t%s\n", p.When(s.Updated))
	if len(s.Metadata) > 0 {
		fmt.Fprintf(tw, "Metadata\t%s\n", MetadataLine(s.Metadata))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.Warning != "" {
		_, err := fmt.Fprintln(w, p.Warning(s.Warning))
		return err
	}
	return nil
}

// MemoryStats is /context stats: the model's memory, KV cache
// size and compression ratios. running is what the backend says of its
// loaded models (Ollama's /api/ps), nil when unknown.
func MemoryStats(w io.Writer, p Printer, f Facts, running []adminapi.RunningModel) error {
	tw := table(w)
	model := f.ModelName()
	fmt.Fprintf(tw, "Model\t%s\n", Clean(orDash(model)))
	modelMemory := "not reported by the backend"
	for _, r := range running {
		if adminapi.SameModel(r.Name, model) || adminapi.SameModel(r.Model, model) {
			modelMemory = fmt.Sprintf("%s (%s in VRAM)", BytesIEC(float64(r.Size)), BytesIEC(float64(r.SizeVRAM)))
		}
	}
	fmt.Fprintf(tw, "Model memory\t%s\n", modelMemory)
	tokens, sent, limit, _, haveTokens := f.tokens()
	if f.Status != nil {
		g := f.Status.GPU
		fmt.Fprintf(tw, "%s\t%s, %s, level %s\n", f.memoryLabel(), f.memoryLine(), orDash(Clean(g.Probe)), orDash(Clean(g.Level)))
		writeDevices(tw, g.Devices)
		q := Clean(f.Status.Context.KVQuantization)
		if m, ok := f.modelStatus(); ok && m.BytesPerToken > 0 {
			bpt := float64(m.BytesPerToken)
			if haveTokens {
				fmt.Fprintf(tw, "KV cache\t%s in use (%s tokens × %s, %s)\n", BytesIEC(float64(tokens)*bpt),
					Grouped(tokens), BytesIEC(bpt), q)
			}
			if m.NumCtx > 0 {
				fmt.Fprintf(tw, "KV reserved\t%s at num_ctx %s\n", BytesIEC(float64(m.NumCtx)*bpt), Grouped(m.NumCtx))
			}
		} else {
			fmt.Fprintf(tw, "KV cache\t%s, size per token not known yet\n", q)
		}
	}
	if haveTokens {
		fmt.Fprintf(tw, "Tokens\t%s\n", p.usage(tokens, sent, limit))
	}
	if f.Session != nil {
		st := f.Session.Stats
		if st.Tokens > 0 && st.Sent > 0 {
			fmt.Fprintf(tw, "Compression\t%s → %s tokens sent (ratio %.2f)\n", Grouped(st.Tokens), Grouped(st.Sent),
				ratio(float64(st.Sent), float64(st.Tokens)))
		} else {
			fmt.Fprintf(tw, "Compression\tnone yet\n")
		}
		fmt.Fprintf(tw, "Trimmed\t%s dropped, %s summarized\n", Plural(st.Dropped, "message"), Grouped(st.Summarized))
		fmt.Fprintf(tw, "Requests\t%s\n", requests(st))
		fmt.Fprintf(tw, "Last request\t%s\n", lastRequest(st))
		trunc := Grouped(st.Truncations)
		if st.LastTruncation != nil {
			trunc += " (last " + p.When(*st.LastTruncation) + ")"
		}
		fmt.Fprintf(tw, "Truncations\t%s by the backend\n", trunc)
	}
	if m, ok := f.modelStatus(); ok && m.Calibration.Observations > 0 {
		fmt.Fprintf(tw, "Calibration\t×%.2f over %s\n", m.Calibration.Ratio, Plural(m.Calibration.Observations, "observation"))
	}
	return tw.Flush()
}

// writeDevices writes a line per GPU (or the system memory).
func writeDevices(w io.Writer, devices []adminapi.Device) {
	for _, d := range devices {
		fmt.Fprintf(w, "Device\t%s: %s, %s free\n", Clean(orDash(d.Name)), gib(d.Used, d.Total, " / "), BytesIEC(float64(d.Free)))
	}
}

// BudgetLine is how the last request's window was divided (the
// X-Ctxproxy-Budget header): "8,192: 120 system, 337 tools, 3 template,
// 1,024 reply, 5,000 conversation, 1,708 free"; tools only when there were
// some.
func BudgetLine(b adminapi.BudgetReport) string {
	tools := ""
	if b.Tools > 0 {
		tools = Grouped(b.Tools) + " tools, "
	}
	return fmt.Sprintf("%s: %s system, %s%s template, %s reply, %s conversation, %s free", Grouped(b.Total),
		Grouped(b.SystemPrompt), tools, Grouped(b.Template), Grouped(b.ResponseReserve), Grouped(b.Conversation), Grouped(b.Free))
}
