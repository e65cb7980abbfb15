package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/config"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/proxy"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// countReport is `ctxproxy count --json`, a contract for scripts (README,
// Commands).
type countReport struct {
	Model    string         `json:"model"`
	Total    int            `json:"total"`
	Limit    int            `json:"limit"`
	Usage    float64        `json:"usage"`
	Messages []countMessage `json:"messages"`
	// Exact and Source say how it was counted: by a running ctxproxy
	// with the model's own tokenizer, or by estimate.
	Exact  bool   `json:"exact"`
	Source string `json:"source"`
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
	proxyURL := cf.fs.String("proxy", envOr(e, "CTXPROXY_PROXY", defaultProxy),
		"a running ctxproxy to count with (its backend's tokenizers, its calibration); env CTXPROXY_PROXY")
	local := cf.fs.Bool("local", false, "count here by estimate, without asking a running ctxproxy")
	c, _, problems, err := cf.load(args, e)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", config.ErrInvalid, strings.Join(problems, "; "))
	}
	var in io.Reader = e.stdin
	if name := cf.fs.Arg(0); name != "" && name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	} else if isTerminal(e.stdin) {
		// Reading a terminal waits for input: say so, and how to end it.
		fmt.Fprintln(e.stderr, "Paste a chat request body or type text to count, then press Ctrl-D on an empty line:")
	}
	data, err := io.ReadAll(io.LimitReader(in, int64(c.MaxBody)+1))
	if err != nil {
		return err
	}
	if int64(len(data)) > int64(c.MaxBody) {
		return fmt.Errorf("input is larger than max_body (%s)", c.MaxBody)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		cf.fs.Usage()
		return errors.New("count: nothing to count: the input is empty")
	}
	chat, err := proxy.ParseChat(data)
	isChat := err == nil
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
	reg := budget.NewRegistry(c.BudgetConfig(), slog.New(slog.DiscardHandler))
	mc := reg.MessageCounter(chat.Model)
	est := mc.Prompt(chat.Messages, chat.Tools)
	lim := reg.Window(chat.Model, 0)
	if chat.NumCtx > 0 {
		lim = lim.Cap(chat.NumCtx)
	}
	if chat.MaxOutput > 0 {
		lim = lim.WithOutput(chat.MaxOutput)
	}
	rep := countReport{Model: chat.Model, Total: est.Tokens, Limit: lim.Effective(), Messages: []countMessage{},
		Source: "estimate:" + reg.Encoding(chat.Model) + " (here, uncalibrated)"}
	for i := range chat.Messages {
		rep.Messages = append(rep.Messages, countMessage{Role: chat.Messages[i].Role, Tokens: chat.Messages[i].Tokens})
	}
	if !*local {
		if remote, err := countRemote(*proxyURL, c.Admin.Token, chat.Model, data, isChat); err == nil {
			rep.Total, rep.Exact, rep.Source = remote.Count, remote.Exact, remote.Source+" (by the ctxproxy at "+config.RedactURL(*proxyURL)+")"
			if len(remote.Messages) == len(rep.Messages) {
				for i, m := range remote.Messages {
					rep.Messages[i].Tokens = m.Tokens
				}
			}
		} else if !errors.Is(err, errNoProxy) {
			fmt.Fprintf(e.stderr, "ctxproxy at %s: %v; counting here by estimate\n", config.RedactURL(*proxyURL), err)
		}
	}
	if rep.Limit > 0 {
		rep.Usage = float64(rep.Total) / float64(rep.Limit)
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
		rep.Model, rep.Source, rep.Total, overhead, rep.Limit, rep.Usage*100)
	return err
}

// errNoProxy means no ctxproxy answered at the address: count here.
var errNoProxy = errors.New("no ctxproxy running")

// countRemote asks a running ctxproxy to count data (a chat body, else
// text) with its backend's tokenizers and its calibration.
func countRemote(base, token, model string, data []byte, isChat bool) (adminapi.TokenizeResponse, error) {
	var req adminapi.TokenizeRequest
	if isChat {
		if err := json.Unmarshal(data, &req); err != nil {
			return adminapi.TokenizeResponse{}, err
		}
	} else {
		text := string(data)
		req.Content = &text
	}
	req.Model = model
	body, err := json.Marshal(req)
	if err != nil {
		return adminapi.TokenizeResponse{}, err
	}
	hr, err := http.NewRequest(http.MethodPost, strings.TrimSuffix(base, "/")+"/ctxproxy/tokenize", bytes.NewReader(body))
	if err != nil {
		return adminapi.TokenizeResponse{}, errNoProxy
	}
	hr.Header.Set("Content-Type", "application/json")
	if token != "" {
		hr.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(hr)
	if err != nil {
		return adminapi.TokenizeResponse{}, errNoProxy
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return adminapi.TokenizeResponse{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return adminapi.TokenizeResponse{}, fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(answer))
	}
	var out adminapi.TokenizeResponse
	if err := json.Unmarshal(answer, &out); err != nil {
		return adminapi.TokenizeResponse{}, fmt.Errorf("not a tokenize answer: %w", err)
	}
	return out, nil
}

// gpuCmd prints the detected memory and, for a model, the num_ctx
// ctxproxy would choose and why.
func gpuCmd(ctx context.Context, args []string, e env) error {
	cf := newConfigFlags("gpu", e, "backend")
	model := cf.fs.String("model", "", "model to size num_ctx for (its facts come from the backend's /api/show)")
	asJSON := cf.fs.Bool("json", false, "print JSON")
	proxyURL := cf.fs.String("proxy", envOr(e, "CTXPROXY_PROXY", defaultProxy),
		"a running ctxproxy to ask first (its memory view, and the num_ctx it chose for the model); env CTXPROXY_PROXY")
	local := cf.fs.Bool("local", false, "probe and size here, without asking a running ctxproxy")
	c, _, problems, err := cf.load(args, e)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", config.ErrInvalid, strings.Join(problems, "; "))
	}
	source := "probed here, sized against " + config.RedactURL(c.Backend.URL)
	if !*local {
		rep, ok, backendURL := gpuFromProxy(*proxyURL, c.Admin.Token, *model)
		if ok {
			if *asJSON {
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			return rep.WriteText(e.stdout)
		}
		// The proxy has not served the model: size it here, against the
		// proxy's backend rather than the default one, unless a backend
		// was named (a URL with credentials comes back with them hidden
		// and is of no use).
		if u, err := url.Parse(backendURL); err == nil && u.Host != "" && u.User == nil && c.Backend.URL == config.Default().Backend.URL {
			c.Backend.URL = backendURL
			source = "probed here, sized against " + backendURL + ", the backend of the ctxproxy at " + config.RedactURL(*proxyURL)
		}
	}
	log := newLogger(config.Log{Level: "warn", Format: "text"}, e.stderr, nil)
	gcfg := c.GPUConfig()
	probe, err := gpu.Detect(ctx, gcfg, log)
	if err != nil {
		return err
	}
	defer probe.Close()
	// The backend's model facts and loaded models (/api/ps, /api/show,
	// /api/tags), read as serve reads them.
	be, _, err := newBackend(c, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	mon := gpu.NewMonitor(probe, gcfg, gpu.MonitorOptions{Logger: slog.New(slog.DiscardHandler), Loaded: be.LoadedModels})
	snap := mon.Sample(ctx)
	var d *gpu.Decision
	if *model != "" {
		facts, weights, err := be.ModelFacts(ctx, *model)
		if err != nil {
			fmt.Fprintf(e.stderr, "model facts: %v (sizing without them)\n", err)
		}
		dec := gpu.NewSizer(gcfg).Decide(gpu.Workload{Name: *model, Facts: facts, Weights: weights}, snap)
		d = &dec
	}
	rep := gpu.NewReport(snap, d)
	rep.Source = source
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(e.stdout)
}

// gpuFromProxy is the running ctxproxy's view: its memory sample and, for
// model, the num_ctx it chose the last time a request used the model.
// ok is false when no ctxproxy answers, or when it has not seen model
// (then the command sizes it here); backend is the URL of the answering
// proxy's backend, as its status shows it.
func gpuFromProxy(base, token, model string) (rep gpu.Report, ok bool, backend string) {
	req, err := http.NewRequest(http.MethodGet, strings.TrimSuffix(base, "/")+"/ctxproxy/status", nil)
	if err != nil {
		return gpu.Report{}, false, ""
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := (&http.Client{Timeout: 3 * time.Second}).Do(req)
	if err != nil {
		return gpu.Report{}, false, ""
	}
	defer resp.Body.Close()
	var st adminapi.Status
	if resp.StatusCode != http.StatusOK || json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&st) != nil {
		return gpu.Report{}, false, ""
	}
	rep = gpu.Report{Devices: append([]gpu.Device{}, st.GPU.Devices...), Probe: st.GPU.Probe, Err: st.GPU.Error,
		ModelMemory: -1, Source: "the running ctxproxy at " + base}
	var total, used uint64
	for _, d := range rep.Devices {
		total, used = total+d.Total, used+d.Used
	}
	if total > 0 {
		rep.Usage = float64(used) / float64(total)
	}
	for _, b := range st.Backends {
		rep.Servers = append(rep.Servers, gpu.ServerMemory{Name: b.Name, Memory: b.Memory, Up: b.Up, GPU: b.GPU})
	}
	if model == "" {
		return rep, true, st.Backend.URL
	}
	for _, m := range st.Models {
		if m.Name == model {
			rep.Model = &gpu.ModelReport{Name: m.Name, NumCtx: m.NumCtx, BytesPerToken: m.BytesPerToken, Reason: m.Reason}
			return rep, true, st.Backend.URL
		}
	}
	return gpu.Report{}, false, st.Backend.URL
}
