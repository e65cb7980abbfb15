// Package budget knows what a prompt costs and what a model's window
// holds: the table of known context windows and a model's Window; a
// prompt counted message by message (MessageCounter) over one of
// budget/tokenizer's text counters, through a bounded cache of counts that
// every encoding shares (Caching); per-model calibration of those
// estimates from what the backend reports, shared between replicas
// (Observation); silent truncation told apart (Truncated, Censored); a session's
// running totals (Tracker, Totals), with how its window divides among a
// prompt's parts (adminapi.Budget, the one shape the admin API and the
// session store show too).
//
// The proxy holds one Registry for the life of the process and, for each
// intercepted chat request:
//
//	mc := reg.MessageCounter(model).Frozen()    // the model's encoding and calibration
//	before := mc.Prompt(msgs, tools)            // X-Ctxproxy-Tokens-Before, usage, warnings
//	win := reg.Window(model, trained).WithOutput(maxTokens).Cap(numCtx)
//	// … cut to win.Effective() (package rewrite), counted again as sent, forwarded;
//	// when the answer reports its prompt tokens:
//	if reg.Observe(model, sent, promptTokens, numCtx) {
//		// silent truncation: warn, count, mark the session
//	}
//
// Counting is cheap when a conversation is resent: every text count is
// cached by a hash of the text, so only new messages are tokenized.
// Estimates are corrected per model from the backend's own counts
// (Ollama's prompt_eval_count, OpenAI's usage.prompt_tokens), because
// local models do not use OpenAI's encodings. A model's own tokenizer,
// read from the backend, is budget/exact's.
package budget
