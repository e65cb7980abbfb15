package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// countReport is `ctxproxy count --json` (DESIGN.md).
type countReport struct {
	Model    string         `json:"model"`
	Total    int            `json:"total"`
	Limit    int            `json:"limit"`
	Usage    float64        `json:"usage"`
	Messages []countMessage `json:"messages"`
}

type countMessage struct {
	Role   string `json:"role"`
	Tokens int    `json:"tokens"`
}

// count prints the tokens of a chat request body (either dialect) or of
// plain text, per message and in total, against the model's limit.
func count(args []string, e env) error {
	cf := newConfigFlags("count", e)
	model := cf.fs.String("model", "", "model to count for (default: the request's own, else gpt-4o)")
	asJSON := cf.fs.Bool("json", false, "print JSON")
	cf.fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: ctxproxy count [--model M] [--json] [FILE|-]")
		cf.fs.PrintDefaults()
	}
	c, _, problems, err := cf.load(args, e)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", errConfig, strings.Join(problems, "; "))
	}
	var in io.Reader = e.stdin
	if name := cf.fs.Arg(0); name != "" && name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	data, err := io.ReadAll(io.LimitReader(in, int64(c.MaxBody)+1))
	if err != nil {
		return err
	}
	if int64(len(data)) > int64(c.MaxBody) {
		return fmt.Errorf("input is larger than max_body (%s)", c.MaxBody)
	}
	chat, err := proxy.ParseChat(data)
	if err != nil {
		// Not a chat body: count it as one user message of plain text.
		chat = proxy.Chat{Messages: []rewrite.Message{{Role: "user", Content: string(data)}}}
	}
	if *model != "" {
		chat.Model = *model
	}
	if chat.Model == "" {
		chat.Model = "gpt-4o"
	}
	reg := budget.NewRegistry(c.budgetConfig(), slog.New(slog.DiscardHandler))
	mc := reg.MessageCounter(chat.Model)
	est := mc.Prompt(chat.Messages, chat.Tools)
	lim := reg.Limits(chat.Model, 0)
	if chat.NumCtx > 0 {
		lim = lim.Cap(chat.NumCtx)
	}
	if chat.MaxOutput > 0 {
		lim = lim.WithOutput(chat.MaxOutput)
	}
	rep := countReport{Model: chat.Model, Total: est.Tokens, Limit: lim.Effective(), Messages: []countMessage{}}
	if rep.Limit > 0 {
		rep.Usage = float64(rep.Total) / float64(rep.Limit)
	}
	for i := range chat.Messages {
		rep.Messages = append(rep.Messages, countMessage{Role: chat.Messages[i].Role, Tokens: chat.Messages[i].Tokens})
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "#\trole\ttokens\t")
	for i, m := range rep.Messages {
		fmt.Fprintf(tw, "%d\t%s\t%d\t\n", i+1, m.Role, m.Tokens)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	overhead := rep.Total
	for _, m := range rep.Messages {
		overhead -= m.Tokens
	}
	_, err = fmt.Fprintf(e.stdout, "\nmodel %s (%s): %d tokens (%d of structure, tools and reply priming), limit %d, usage %.1f%%\n",
		rep.Model, reg.Encoding(rep.Model), rep.Total, overhead, rep.Limit, rep.Usage*100)
	return err
}

// gpuCmd prints the detected memory and, for a model, the num_ctx
// ctxproxy would choose and why.
func gpuCmd(ctx context.Context, args []string, e env) error {
	cf := newConfigFlags("gpu", e)
	model := cf.fs.String("model", "", "model to size num_ctx for (its facts come from the backend's /api/show)")
	asJSON := cf.fs.Bool("json", false, "print JSON")
	c, _, problems, err := cf.load(args, e)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", errConfig, strings.Join(problems, "; "))
	}
	log := newLogger(LogConfig{Level: "warn", Format: "text"}, e.stderr, nil)
	gcfg := c.gpuConfig()
	probe, err := gpu.Detect(ctx, gcfg, log)
	if err != nil {
		return err
	}
	defer probe.Close()
	// The proxy's own backend calls (/api/ps, /api/show, /api/tags), as
	// serve would make them.
	backend, err := proxy.New(c.proxyConfig(), proxy.Deps{}, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	mon := gpu.NewMonitor(probe, gcfg, gpu.MonitorOptions{Logger: slog.New(slog.DiscardHandler), Loaded: backend.LoadedModels})
	snap := mon.Sample(ctx)
	var d *gpu.Decision
	if *model != "" {
		facts, weights, err := backend.Backend().ModelFacts(ctx, *model)
		if err != nil {
			fmt.Fprintf(e.stderr, "model facts: %v (sizing without them)\n", err)
		}
		dec := gpu.NewSizer(gcfg).Decide(gpu.Model{Name: *model, Facts: facts, Weights: weights}, snap)
		d = &dec
	}
	rep := gpu.NewReport(snap, d)
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(e.stdout)
}
