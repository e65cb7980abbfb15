package proxy

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/ctxproxy/ctxproxy/plan"
)

// logExchange counts an exchange in the metrics and writes its log line.
func logExchange(log *slog.Logger, m *metrics, ex *exchange, p *plan.Plan) {
	status := ex.status
	m.requests.WithLabelValues(ex.route, ex.dialect.String(), strconv.Itoa(status)).Inc()
	took := time.Since(ex.start)
	m.duration.WithLabelValues(ex.route).Observe(took.Seconds())
	if p != nil {
		if p.Counter != nil {
			m.exactCounts.WithLabelValues(p.CountMethod()).Inc()
			m.tokensBefore.Observe(float64(p.Before.Tokens))
			m.tokensAfter.Observe(float64(p.After.Tokens))
		}
		m.observeNumCtx(p.NumCtx)
		if p.Result.Notice != "" {
			m.dropped.Add(float64(p.Result.Dropped - p.Result.Summarized))
			m.summarized.Add(float64(p.Result.Summarized))
		}
	}
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelWarn
	}
	ctx := context.Background()
	if !log.Enabled(ctx, level) {
		return // the attributes below cost a dozen allocations
	}
	attrs := []any{"route", ex.route, "dialect", ex.dialect.String(), "model", ex.model, "session", ex.session,
		"stream", ex.stream, "status", status, "duration_ms", ms(took)}
	if p != nil {
		if p.Counter != nil {
			attrs = append(attrs, "tokens_before", p.Before.Tokens, "tokens", p.After.Tokens, "exact", p.Before.Exact, "limit", p.Limit,
				"usage", fmt.Sprintf("%.1f%%", p.Usage()*100))
		}
		if p.NumCtx > 0 {
			attrs = append(attrs, "num_ctx", p.NumCtx)
		}
		if p.Result.Notice != "" {
			attrs = append(attrs, "dropped", p.Result.Dropped, "summarized", p.Result.Summarized, "notice", p.Result.Notice)
		}
		if p.Translate {
			attrs = append(attrs, "translated", true)
		}
	}
	attrs = append(attrs, ex.logAttrs...)
	log.Log(ctx, level, "chat", attrs...)
}

// ms is d in milliseconds to a tenth, the unit in the attribute's name:
// slog writes a time.Duration to JSON as bare nanoseconds.
func ms(d time.Duration) float64 {
	return float64(d.Round(100*time.Microsecond)) / float64(time.Millisecond)
}
