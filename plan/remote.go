package plan

import (
	"context"
	"encoding/json"
	"math"

	"github.com/ctxproxy/ctxproxy/backend"
	"github.com/ctxproxy/ctxproxy/budget"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/rewrite"
)

// RemoteCounter counts one request with the backend's own tokenize API
// (vLLM, llama.cpp's server): whole prompts exactly, by a round trip
// (none for a prompt counted before). Strategies need each message's
// share; those are the estimate's, scaled so that they add up to the
// backend's count, and the cut prompt is counted by the backend again.
type RemoteCounter struct {
	ctx   context.Context
	be    *backend.Backend
	model string
	est   *budget.MessageCounter
	ratio float64
	last  []rewrite.Message
	total int
	err   error
}

func NewRemote(ctx context.Context, be *backend.Backend, model string, est *budget.MessageCounter) *RemoteCounter {
	return &RemoteCounter{ctx: ctx, be: be, model: model, est: est, ratio: 1}
}

// Prompt counts msgs and tools with the backend. The first call sets the
// ratio of the backend's count to the estimate that shares are scaled by.
func (c *RemoteCounter) Prompt(msgs []rewrite.Message, tools json.RawMessage) budget.Estimate {
	arr, err := wire.EncodeMessages(msgs)
	if err != nil {
		c.fail(err)
		return budget.Estimate{}
	}
	n, err := c.be.CountRemote(c.ctx, c.model, arr, tools)
	if err != nil {
		c.fail(err)
		return budget.Estimate{}
	}
	if c.last == nil {
		// The estimate of the same prompt, on copies: the messages' own
		// Tokens are left for this counter's scaled shares.
		copies := append([]rewrite.Message(nil), msgs...)
		for i := range copies {
			copies[i].Tokens = 0
		}
		if e := c.est.Prompt(copies, tools).Tokens; e > 0 {
			c.ratio = float64(n) / float64(e)
		}
	}
	c.last, c.total = msgs, n
	return budget.Estimate{Tokens: n, Raw: n, Chars: n, Exact: true}
}

func (c *RemoteCounter) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// CountMessage is m's estimated share, scaled to the backend's count.
func (c *RemoteCounter) CountMessage(m *rewrite.Message) int {
	if m.Tokens > 0 {
		return m.Tokens
	}
	tmp := *m
	tmp.Tokens = 0
	m.Tokens = max(1, int(math.Round(float64(c.est.CountMessage(&tmp))*c.ratio)))
	return m.Tokens
}

// CountText is the estimate of s, scaled.
func (c *RemoteCounter) CountText(s string) int {
	return int(math.Round(float64(c.est.CountText(s)) * c.ratio))
}

// Overhead is what of the last counted prompt is no message's share.
func (c *RemoteCounter) Overhead(json.RawMessage) int {
	n := c.total
	for i := range c.last {
		n -= c.CountMessage(&c.last[i])
	}
	return max(0, n)
}

var _ Counter = (*RemoteCounter)(nil)

// Err is the first error in counting with c.
func (c *RemoteCounter) Err() error { return c.err }
