package main

import (
	"github.com/ctxproxy/ctxproxy/api"
	"github.com/ctxproxy/ctxproxy/client"
	"github.com/ctxproxy/ctxproxy/proxy"

	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
)

// How the terminal commands show things: colors, numbers, and the status
// display and tables that chat's /context and "ctxproxy context" share.

const (
	colorYellow = "\x1b[33m"
	// colorOrange is 256-color orange: seed 000 wants the 90% warning in
	// orange, which the 16 basic colors do not have.
	colorOrange = "\x1b[38;5;208m"
	colorCyan   = "\x1b[36m"
	colorRed    = "\x1b[31m"
	colorDim    = "\x1b[2m"
	colorReset  = "\x1b[0m"
)

// clean replaces control characters in text from the network (session
// ids, model names, messages), so none can drive the terminal.
func clean(s string) string {
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

// grouped writes n with thousands separators: 131072 → "131,072".
func grouped(n int) string {
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

// percent writes a fraction as a percentage with the given decimals.
func percent(f float64, decimals int) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		f = 0
	}
	return strconv.FormatFloat(f*100, 'f', decimals, 64) + "%"
}

// bytesIEC writes a byte count in binary units: "512.0 MiB", "24.0 GiB".
func bytesIEC(n float64) string {
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

// view shows the admin API's answers.
type view struct {
	p palette
	// loc is where times are shown (the local zone; $TZ when set).
	loc *time.Location
}

func (v view) when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.In(v.loc).Format("2006-01-02 15:04:05")
}

// table is a tabwriter for aligned columns.
func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// facts is what a context status shows: the proxy's status, the session,
// and the model the user talks to. A part that could not be fetched is
// nil; head, from the last reply's headers, fills in for the session.
type facts struct {
	model   string
	status  *api.Status
	session *api.SessionDetail
	head    *client.Headers
}

func (f facts) modelName() string {
	if f.model != "" {
		return f.model
	}
	if f.session != nil {
		return f.session.Model
	}
	return ""
}

// tokens returns the conversation's tokens, the effective limit and the
// usage fraction.
func (f facts) tokens() (tokens, limit int, usage float64, ok bool) {
	switch {
	case f.session != nil:
		st := f.session.Stats
		usage = st.Usage
		if usage == 0 {
			usage = ratio(float64(st.Tokens), float64(st.Limit))
		}
		return st.Tokens, st.Limit, usage, true
	case f.head != nil && f.head.Seen && f.head.Limit > 0:
		return f.head.Tokens, f.head.Limit, f.head.Usage / 100, true
	}
	return 0, 0, 0, false
}

func (f facts) modelStatus() (api.ModelStatus, bool) {
	if f.status == nil {
		return api.ModelStatus{}, false
	}
	return f.status.Model(f.modelName())
}

// memoryLabel is "VRAM", or "RAM" when ctxproxy sizes from system memory.
func (f facts) memoryLabel() string {
	if f.status != nil && f.status.GPU.Probe == "cpu" {
		return "RAM"
	}
	return "VRAM"
}

func (f facts) memoryUsage() float64 {
	g := f.status.GPU
	if g.Usage > 0 {
		return g.Usage
	}
	return ratio(float64(g.Used), float64(g.Total))
}

// autoCompress says whether ctxproxy trims or summarizes by itself, and
// from what usage.
func (f facts) autoCompress() (on bool, threshold float64) {
	s := f.status.Strategy
	return s.Mode != "" && s.Mode != "none", s.Threshold
}

// statusBar is the one line shown after each reply: seed 004 R9's fields,
// with ⚠ from 80% usage.
func statusBar(p palette, f facts) string {
	var parts []string
	if m := f.modelName(); m != "" {
		parts = append(parts, clean(m))
	}
	warn := ""
	if tokens, limit, usage, ok := f.tokens(); ok {
		parts = append(parts, fmt.Sprintf("%s/%s tokens (%s)", grouped(tokens), grouped(limit), percent(usage, 0)))
		if usage >= warnAt {
			warn = p.paint(usageColor(usage), "⚠")
		}
	}
	if f.status != nil {
		if f.status.GPU.Total > 0 {
			parts = append(parts, fmt.Sprintf("%s %s (%s)", f.memoryLabel(),
				gib(f.status.GPU.Used, f.status.GPU.Total, "/"), percent(f.memoryUsage(), 0)))
		}
		if q := f.status.Context.KVQuantization; q != "" {
			parts = append(parts, clean(q))
		}
	}
	if f.session != nil {
		parts = append(parts, plural(f.session.Snapshots, "snapshot"))
	}
	if f.status != nil {
		if on, threshold := f.autoCompress(); on {
			parts = append(parts, "auto-compress at "+percent(threshold, 0))
		} else {
			parts = append(parts, "auto-compress off")
		}
	}
	if len(parts) == 0 {
		return ""
	}
	bar := p.paint(colorDim, strings.Join(parts, " · "))
	if warn != "" {
		bar = warn + " " + bar
	}
	return bar
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return grouped(n) + " " + noun + "s"
}

// writeContextStatus is /context and "ctxproxy context status --session":
// every field of seed 004 R9, then the session's warning (R9.7).
func writeContextStatus(w io.Writer, v view, f facts) error {
	tw := table(w)
	if f.session != nil {
		fmt.Fprintf(tw, "Session\t%s\n", clean(f.session.SessionID))
	}
	model := f.modelName()
	if model == "" {
		model = "-"
	}
	fmt.Fprintf(tw, "Model\t%s\n", clean(model))
	tokens, limit, usage, haveTokens := f.tokens()
	if haveTokens {
		line := fmt.Sprintf("%s / %s (%s)", grouped(tokens), grouped(limit), percent(usage, 1))
		if usage >= warnAt {
			line += " " + v.p.paint(usageColor(usage), "⚠")
		}
		fmt.Fprintf(tw, "Tokens\t%s\n", line)
	} else {
		fmt.Fprintf(tw, "Tokens\tunknown\n")
	}
	if f.status != nil {
		g := f.status.GPU
		if g.Total > 0 {
			fmt.Fprintf(tw, "%s\t%s (%s)\n", f.memoryLabel(), gib(g.Used, g.Total, " / "), percent(f.memoryUsage(), 1))
		} else {
			fmt.Fprintf(tw, "%s\tunknown\n", f.memoryLabel())
		}
		kv := clean(f.status.Context.KVQuantization)
		if m, ok := f.modelStatus(); ok && m.BytesPerToken > 0 && haveTokens {
			kv += fmt.Sprintf(", %s (%s tokens × %s)", bytesIEC(float64(tokens)*float64(m.BytesPerToken)),
				grouped(tokens), bytesIEC(float64(m.BytesPerToken)))
		} else {
			kv += ", memory unknown (the model's size per token is not known yet)"
		}
		fmt.Fprintf(tw, "KV cache\t%s\n", kv)
	}
	if f.session != nil {
		fmt.Fprintf(tw, "Snapshots\t%s\n", grouped(f.session.Snapshots))
	}
	if f.status != nil {
		s := f.status.Strategy
		if on, threshold := f.autoCompress(); on {
			line := fmt.Sprintf("on at %s (%s, down to %s)", percent(threshold, 0), clean(s.Mode), percent(s.Target, 0))
			if s.EffectiveThreshold > 0 && s.EffectiveThreshold != threshold {
				line += fmt.Sprintf(", now %s for memory", percent(s.EffectiveThreshold, 0))
			}
			fmt.Fprintf(tw, "Auto-compress\t%s\n", line)
		} else {
			fmt.Fprintf(tw, "Auto-compress\toff\n")
		}
		fmt.Fprintf(tw, "Context size\t%s\n", sizeLine(f))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if f.session != nil && f.session.Warning != "" {
		_, err := fmt.Fprintln(w, v.p.warning(f.session.Warning))
		return err
	}
	return nil
}

func sizeLine(f facts) string {
	c := f.status.Context
	line := "auto (from free VRAM)"
	if !c.Auto {
		line = "fixed at " + grouped(c.TargetSize) + " tokens"
	}
	if m, ok := f.modelStatus(); ok && m.NumCtx > 0 {
		line += ", num_ctx " + grouped(m.NumCtx)
	}
	return line
}

// writeSessionStats is /stats and "ctxproxy context show": the session
// and its running token total (seed 000; seed 003's summary).
func writeSessionStats(w io.Writer, v view, s api.SessionDetail) error {
	tw := table(w)
	st := s.Stats
	usage := st.Usage
	if usage == 0 {
		usage = ratio(float64(st.Tokens), float64(st.Limit))
	}
	model := s.Model
	if model == "" {
		model = "-"
	}
	fmt.Fprintf(tw, "Session\t%s\n", clean(s.SessionID))
	fmt.Fprintf(tw, "Model\t%s\n", clean(model))
	fmt.Fprintf(tw, "Messages\t%s\n", grouped(s.Messages))
	if st.Sent > 0 && st.Sent != st.Tokens {
		fmt.Fprintf(tw, "Tokens\t%s\n", proxy.UsageText(st.Tokens, st.Sent, st.Limit))
	} else {
		fmt.Fprintf(tw, "Tokens\t%s / %s (%s)\n", grouped(st.Tokens), grouped(st.Limit), percent(usage, 1))
	}
	fmt.Fprintf(tw, "Requests\t%s (%s prompt + %s completion tokens)\n",
		grouped(st.Requests), grouped(st.PromptTokens), grouped(st.CompletionTokens))
	fmt.Fprintf(tw, "Trimmed\t%s dropped, %s summarized\n", plural(st.Dropped, "message"), grouped(st.Summarized))
	fmt.Fprintf(tw, "Snapshots\t%s\n", grouped(s.Snapshots))
	fmt.Fprintf(tw, "Created\t%s\n", v.when(s.Created))
	fmt.Fprintf(tw, "Updated\t%s\n", v.when(s.Updated))
	if len(s.Metadata) > 0 {
		fmt.Fprintf(tw, "Metadata\t%s\n", metadataLine(s.Metadata))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.Warning != "" {
		_, err := fmt.Fprintln(w, v.p.warning(s.Warning))
		return err
	}
	return nil
}

// metadataLine writes metadata as key=value pairs, sorted by key.
func metadataLine(m map[string]any) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		val := fmt.Sprint(m[k])
		if _, ok := m[k].(string); !ok {
			if data, err := jsonString(m[k]); err == nil {
				val = data
			}
		}
		parts = append(parts, clean(k)+"="+clean(val))
	}
	return strings.Join(parts, ", ")
}

// writeMemoryStats is /context stats: seed 004 R7.9's model memory, KV
// cache size and compression ratios.
func writeMemoryStats(w io.Writer, f facts, running []client.RunningModel) error {
	tw := table(w)
	model := f.modelName()
	fmt.Fprintf(tw, "Model\t%s\n", clean(orDash(model)))
	modelMemory := "not reported by the backend"
	for _, r := range running {
		if api.SameModel(r.Name, model) || api.SameModel(r.Model, model) {
			modelMemory = fmt.Sprintf("%s (%s in VRAM)", bytesIEC(float64(r.Size)), bytesIEC(float64(r.SizeVRAM)))
		}
	}
	fmt.Fprintf(tw, "Model memory\t%s\n", modelMemory)
	tokens, limit, usage, haveTokens := f.tokens()
	if f.status != nil {
		g := f.status.GPU
		fmt.Fprintf(tw, "%s\t%s (%s), %s, level %s\n", f.memoryLabel(), gib(g.Used, g.Total, " / "),
			percent(f.memoryUsage(), 1), orDash(clean(g.Probe)), orDash(clean(g.Level)))
		writeDevices(tw, g.Devices)
		q := clean(f.status.Context.KVQuantization)
		if m, ok := f.modelStatus(); ok && m.BytesPerToken > 0 {
			if haveTokens {
				fmt.Fprintf(tw, "KV cache\t%s in use (%s tokens × %s, %s)\n", bytesIEC(float64(tokens)*float64(m.BytesPerToken)),
					grouped(tokens), bytesIEC(float64(m.BytesPerToken)), q)
			}
			if m.NumCtx > 0 {
				fmt.Fprintf(tw, "KV reserved\t%s at num_ctx %s\n", bytesIEC(float64(m.NumCtx)*float64(m.BytesPerToken)), grouped(m.NumCtx))
			}
		} else {
			fmt.Fprintf(tw, "KV cache\t%s, size per token not known yet\n", q)
		}
	}
	if haveTokens {
		fmt.Fprintf(tw, "Tokens\t%s / %s (%s)\n", grouped(tokens), grouped(limit), percent(usage, 1))
	}
	if f.session != nil {
		st := f.session.Stats
		if st.Tokens > 0 && st.Sent > 0 {
			fmt.Fprintf(tw, "Compression\t%s → %s tokens sent (ratio %.2f)\n", grouped(st.Tokens), grouped(st.Sent),
				ratio(float64(st.Sent), float64(st.Tokens)))
		} else {
			fmt.Fprintf(tw, "Compression\tnone yet\n")
		}
		fmt.Fprintf(tw, "Trimmed\t%s dropped, %s summarized\n", plural(st.Dropped, "message"), grouped(st.Summarized))
		fmt.Fprintf(tw, "Requests\t%s (%s prompt + %s completion tokens)\n",
			grouped(st.Requests), grouped(st.PromptTokens), grouped(st.CompletionTokens))
		trunc := grouped(st.Truncations)
		if st.LastTruncation != nil {
			trunc += fmt.Sprintf(" (last %s)", st.LastTruncation.Local().Format(time.DateTime))
		}
		fmt.Fprintf(tw, "Truncations\t%s by the backend\n", trunc)
	}
	if m, ok := f.modelStatus(); ok && m.Calibration.Observations > 0 {
		fmt.Fprintf(tw, "Calibration\t×%.2f over %s\n", m.Calibration.Ratio, plural(m.Calibration.Observations, "observation"))
	}
	return tw.Flush()
}

// jsonString writes v as compact JSON.
func jsonString(v any) (string, error) {
	data, err := json.Marshal(v)
	return string(data), err
}

// writeDevices writes a line per GPU (or the system memory).
func writeDevices(w io.Writer, devices []api.Device) {
	for _, d := range devices {
		fmt.Fprintf(w, "Device\t%s: %s, %s free\n", clean(orDash(d.Name)), gib(d.Used, d.Total, " / "), bytesIEC(float64(d.Free)))
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeProxyStatus is "ctxproxy context status" without a session.
func writeProxyStatus(w io.Writer, s api.Status) error {
	tw := table(w)
	up := time.Duration(s.UptimeSeconds * float64(time.Second)).Round(time.Second)
	fmt.Fprintf(tw, "Version\t%s, up %s\n", clean(s.Version), up)
	ready := "not ready"
	if s.Backend.Ready {
		ready = "ready"
	}
	fmt.Fprintf(tw, "Backend\t%s (%s, %s)\n", clean(s.Backend.URL), clean(s.Backend.Kind), ready)
	st := s.Strategy
	line := fmt.Sprintf("%s: act at %s, cut to %s, on overflow %s", clean(st.Mode), percent(st.Threshold, 0),
		percent(st.Target, 0), clean(st.OnOverflow))
	if st.EffectiveThreshold > 0 && st.EffectiveThreshold != st.Threshold {
		line += fmt.Sprintf(" (acting at %s now for memory)", percent(st.EffectiveThreshold, 0))
	}
	fmt.Fprintf(tw, "Strategy\t%s\n", line)
	c := s.Context
	size := fmt.Sprintf("auto from free VRAM (%s–%s tokens)", grouped(c.MinSize), grouped(c.MaxSize))
	if !c.Auto {
		size = "fixed at " + grouped(c.TargetSize) + " tokens"
	}
	fmt.Fprintf(tw, "Context size\t%s, KV %s, %s parallel\n", size, clean(c.KVQuantization), grouped(c.NumParallel))
	f := facts{status: &s}
	g := s.GPU
	fmt.Fprintf(tw, "%s\t%s (%s), %s, level %s\n", f.memoryLabel(), gib(g.Used, g.Total, " / "),
		percent(f.memoryUsage(), 1), orDash(clean(g.Probe)), orDash(clean(g.Level)))
	writeDevices(tw, g.Devices)
	fmt.Fprintf(tw, "Snapshots\t%s store, auto at %s, keep %s\n", clean(s.Snapshots.Store),
		percent(s.Snapshots.AutoThreshold, 0), grouped(s.Snapshots.MaxCount))
	summary := "the chat's own model"
	if s.Summarize.Model != "" {
		summary = clean(s.Summarize.Model)
	}
	fmt.Fprintf(tw, "Summarize\twith %s, keep %s recent\n", summary, grouped(s.Summarize.KeepRecent))
	fmt.Fprintf(tw, "Sessions\t%s (%s in flight)\n", grouped(s.Sessions), grouped(int(s.Inflight)))
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Models) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = table(w)
	fmt.Fprintln(tw, "MODEL\tMAX\tOUTPUT\tEFFECTIVE\tNUM_CTX\tKV/TOKEN\tCALIBRATION\tREASON")
	for _, m := range s.Models {
		cal := "-"
		if m.Calibration.Observations > 0 {
			cal = fmt.Sprintf("×%.2f (%d)", m.Calibration.Ratio, m.Calibration.Observations)
		}
		kv := "-"
		if m.BytesPerToken > 0 {
			kv = bytesIEC(float64(m.BytesPerToken))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clean(m.Name), grouped(m.MaxTokens), grouped(m.MaxOutputTokens),
			grouped(m.Effective), grouped(m.NumCtx), kv, cal, clean(orDash(m.Reason)))
	}
	return tw.Flush()
}

// writeSessions is the table of "ctxproxy context list" without a session.
func writeSessions(w io.Writer, v view, sessions []api.SessionInfo) error {
	if len(sessions) == 0 {
		_, err := fmt.Fprintln(w, "No sessions yet.")
		return err
	}
	tw := table(w)
	fmt.Fprintln(tw, "SESSION\tMODEL\tMESSAGES\tTOKENS\tUSAGE\tREQUESTS\tSNAPSHOTS\tUPDATED")
	for _, s := range sessions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%s\t%s\t%s\t%s\n", clean(s.SessionID), clean(orDash(s.Model)),
			grouped(s.Messages), grouped(s.Tokens), grouped(s.Limit), percent(s.Usage, 0),
			grouped(s.Requests), grouped(s.Snapshots), v.when(s.Updated))
	}
	return tw.Flush()
}

// writeSnapshots is /context list: a session's snapshots, newest first.
func writeSnapshots(w io.Writer, v view, snaps []api.SnapshotInfo) error {
	if len(snaps) == 0 {
		_, err := fmt.Fprintln(w, "No snapshots yet.")
		return err
	}
	tw := table(w)
	fmt.Fprintln(tw, "ID\tCREATED\tREASON\tMESSAGES\tTOKENS\tUSAGE\tSIZE")
	for _, s := range snaps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clean(s.ID), v.when(s.Created), clean(orDash(s.Reason)),
			grouped(s.Messages), grouped(s.Tokens), percent(s.Usage, 0), bytesIEC(float64(s.Bytes)))
	}
	return tw.Flush()
}
