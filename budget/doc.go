// Package budget counts tokens and knows model limits: tiktoken and
// approximate counters, a bounded cache of counts, per-model calibration
// from what the backend reports, the table of known context windows, and a
// running tracker of how a request's window is divided (adminapi.Budget,
// the one shape the admin API and the session store show too).
//
// The proxy holds one Registry for the life of the process and, for each
// intercepted chat request:
//
//	mc := reg.MessageCounter(model)             // a rewrite.Counter
//	before := mc.Prompt(msgs, tools)            // X-Ctxproxy-Tokens-Before, usage, warnings
//	lim := reg.Limits(model, trainedCtx).WithOutput(maxTokens).Cap(numCtx)
//	res, err := strategy.Apply(ctx, msgs, target, mc)
//	sent := mc.Prompt(res.Messages, tools)      // X-Ctxproxy-Tokens
//	// … forward; when the response reports its prompt tokens:
//	if reg.Observe(model, sent, promptTokens, numCtx) {
//		// silent truncation: warn, count, mark the session
//	}
//
// Counting is cheap when a conversation is resent: every text count is
// cached by a hash of the text, so only new messages are tokenized.
// Estimates are corrected per model from the backend's own counts
// (Ollama's prompt_eval_count, OpenAI's usage.prompt_tokens), because local
// models do not use OpenAI's tokenizers.
package budget
