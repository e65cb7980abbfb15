// Command replay replays a long chat against a real Ollama through
// ctxproxy, once per strategy, beside a per-turn trimmer and Ollama alone,
// and prints, for the second half of the turns, what the backend spent
// reading prompts (the prompt cache at work), the client's wall time, the
// tokens forwarded and the cuts:
//
//	eval "$(scripts/realollama/start.sh 11500)"
//	go build -o /tmp/ctxproxy ./cmd/ctxproxy
//	go run ./scripts/replay -ollama "$OLLAMA_URL" -bin /tmp/ctxproxy
//
// -check exits 1 unless the strategies meet the cache targets of
// docs/strategies.md ("The prompt cache").
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/testkit/replay"
)

func main() {
	var cfg replay.Config
	paths := strings.Join(append([]string{replay.Alone, replay.PerTurn}, replay.Modes...), ",")
	flag.StringVar(&cfg.Ollama, "ollama", os.Getenv("OLLAMA_URL"), "the real Ollama's URL")
	flag.StringVar(&cfg.Bin, "bin", "ctxproxy", "the ctxproxy binary")
	flag.StringVar(&cfg.Model, "model", "tiny", "the model")
	flag.IntVar(&cfg.Turns, "turns", 60, "user turns")
	flag.IntVar(&cfg.Window, "window", 4096, "the model's context window (models.<model>.max_tokens)")
	flag.IntVar(&cfg.UserChars, "user-chars", 300, "mean length of a user message")
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the chat")
	flag.DurationVar(&cfg.Think, "think", 0, "pause between a reply and the next turn")
	flag.StringVar(&cfg.Strategy, "strategy", "", `keys added to the strategies' strategy: section, e.g. "threshold: 0.9, target: 0.7"`)
	flag.StringVar(&cfg.YAML, "yaml", "", "configuration added to every ctxproxy")
	flag.StringVar(&paths, "paths", paths, "what to replay: ollama, trimmer and strategy modes")
	flag.BoolVar(&cfg.Verbose, "v", false, "a line a turn")
	flag.StringVar(&cfg.Dir, "dir", "", "keep the ctxproxy configurations, data and logs here")
	check := flag.Bool("check", false, "exit 1 unless the cache targets are met")
	flag.Parse()
	cfg.Paths = strings.Split(paths, ",")
	cfg.Log = os.Stderr
	if cfg.Dir == "" {
		dir, err := os.MkdirTemp("", "replay-")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(dir)
		cfg.Dir = dir
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	results, err := replay.Run(ctx, cfg)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%d turns, window %d, model %s, %s; sums over turns %d–%d\n\n", cfg.Turns, cfg.Window, cfg.Model,
		time.Since(start).Round(time.Second), cfg.Turns/2+1, cfg.Turns)
	replay.Table(os.Stdout, results)
	if *check {
		if problems := replay.Check(results); len(problems) > 0 {
			fmt.Println()
			for _, p := range problems {
				fmt.Println("FAIL:", p)
			}
			os.Exit(1)
		}
		fmt.Println("\nevery target met")
	}
}

func fail(err error) {
	_, _ = io.WriteString(os.Stderr, "replay: "+err.Error()+"\n")
	os.Exit(1)
}
