package report

import (
	"fmt"
	"io"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// ProxyStatus is "ctxproxy context status" without a session: the whole
// proxy, then a table of the models it knows.
func ProxyStatus(w io.Writer, s adminapi.Status) error {
	tw := table(w)
	up := time.Duration(s.UptimeSeconds * float64(time.Second)).Round(time.Second)
	fmt.Fprintf(tw, "Version\t%s, up %s\n", Clean(s.Version), up)
	ready := "not ready"
	if s.Backend.Ready {
		ready = "ready"
	}
	fmt.Fprintf(tw, "Backend\t%s (%s, %s)\n", Clean(s.Backend.URL), Clean(s.Backend.Kind), ready)
	st := s.Strategy
	line := fmt.Sprintf("%s: act at %s, cut to %s, on overflow %s", Clean(st.Mode), Percent(st.Threshold, 0),
		Percent(st.Target, 0), Clean(st.OnOverflow))
	if st.EffectiveThreshold > 0 && st.EffectiveThreshold != st.Threshold {
		line += fmt.Sprintf(" (acting at %s now for memory)", Percent(st.EffectiveThreshold, 0))
	}
	fmt.Fprintf(tw, "Strategy\t%s\n", line)
	c := s.Context
	size := fmt.Sprintf("auto from free VRAM (%s–%s tokens)", Grouped(c.MinSize), Grouped(c.MaxSize))
	if !c.Auto {
		size = "fixed at " + Grouped(c.TargetSize) + " tokens"
	}
	fmt.Fprintf(tw, "Context size\t%s, KV %s, %s parallel\n", size, Clean(c.KVQuantization), Grouped(c.NumParallel))
	f := Facts{Status: &s}
	g := s.GPU
	fmt.Fprintf(tw, "%s\t%s (%s), %s, level %s\n", f.memoryLabel(), gib(g.Used, g.Total, " / "),
		Percent(f.memoryUsage(), 1), orDash(Clean(g.Probe)), orDash(Clean(g.Level)))
	writeDevices(tw, g.Devices)
	fmt.Fprintf(tw, "Snapshots\t%s store, auto at %s, keep %s\n", Clean(s.Snapshots.Store),
		Percent(s.Snapshots.AutoThreshold, 0), Grouped(s.Snapshots.MaxCount))
	summary := "the chat's own model"
	if s.Summarize.Model != "" {
		summary = Clean(s.Summarize.Model)
	}
	fmt.Fprintf(tw, "Summarize\twith %s, keep %s recent\n", summary, Grouped(s.Summarize.KeepRecent))
	fmt.Fprintf(tw, "Sessions\t%s (%s in flight)\n", Grouped(s.Sessions), Grouped(int(s.Inflight)))
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
			kv = BytesIEC(float64(m.BytesPerToken))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", Clean(m.Name), Grouped(m.MaxTokens), Grouped(m.MaxOutputTokens),
			Grouped(m.Effective), Grouped(m.NumCtx), kv, cal, Clean(orDash(m.Reason)))
	}
	return tw.Flush()
}

// Sessions is the table of "ctxproxy context list" without a session.
func Sessions(w io.Writer, p Printer, sessions []adminapi.SessionInfo) error {
	if len(sessions) == 0 {
		_, err := fmt.Fprintln(w, "No sessions yet.")
		return err
	}
	tw := table(w)
	fmt.Fprintln(tw, "SESSION\tMODEL\tMESSAGES\tTOKENS\tUSAGE\tREQUESTS\tSNAPSHOTS\tUPDATED")
	for _, s := range sessions {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%s\t%s\t%s\t%s\n", Clean(s.SessionID), Clean(orDash(s.Model)),
			Grouped(s.Messages), Grouped(s.Tokens), Grouped(s.Limit), Percent(s.Usage, 0),
			Grouped(s.Requests), Grouped(s.Snapshots), p.When(s.Updated))
	}
	return tw.Flush()
}

// Snapshots is /context list: a session's snapshots, newest first.
func Snapshots(w io.Writer, p Printer, snaps []adminapi.SnapshotInfo) error {
	if len(snaps) == 0 {
		_, err := fmt.Fprintln(w, "No snapshots yet.")
		return err
	}
	tw := table(w)
	fmt.Fprintln(tw, "ID\tCREATED\tREASON\tMESSAGES\tTOKENS\tUSAGE\tSIZE")
	for _, s := range snaps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", Clean(s.ID), p.When(s.Created), Clean(orDash(s.Reason)),
			Grouped(s.Messages), Grouped(s.Tokens), Percent(s.Usage, 0), BytesIEC(float64(s.Bytes)))
	}
	return tw.Flush()
}
