package sessions

import (
	"context"
	"fmt"
	"strings"

	"github.com/ctxproxy/ctxproxy/adminapi"
)

// Compact is /Compact INSTRUCTIONS (in-band, the REPL, and the admin API's
// compress with a body): compress, with instructions appended to the
// summary prompt of the summaries it writes. When nothing is summarized —
// the strategy does not summarize — it compresses as /context compress
// does and says the instructions were not used.
func (s *Service) Compact(ctx context.Context, id, instructions string) (adminapi.Compressed, error) {
	return s.compact(ctx, id, instructions, false)
}

// CompactDryRun answers what Compact would do now (the admin API's
// compress with ?dry_run=1) and changes nothing: see Compress.
func (s *Service) CompactDryRun(ctx context.Context, id, instructions string) (adminapi.Compressed, error) {
	return s.compact(ctx, id, instructions, true)
}

func (s *Service) compact(ctx context.Context, id, instructions string, dryRun bool) (adminapi.Compressed, error) {
	instructions = strings.TrimSpace(instructions)
	res, err := s.Compress(ctx, id, instructions, dryRun)
	if err == nil && instructions != "" && res.Summarized == 0 {
		mode := "?"
		if t := s.Trimmer.Load(); t != nil {
			mode = t.Mode()
		}
		res.Notice = strings.TrimSpace(res.Notice + " " + fmt.Sprintf(
			"The instructions were not used: nothing was summarized (strategy.mode %s).", mode))
	}
	return res, err
}
