// Package tokenizer counts the tokens of plain text without the model's
// own vocabulary: OpenAI's BPE encodings cl100k_base and o200k_base
// (Tiktoken: a hand-written pre-tokenizer, pretokenize.go, and byte-pair
// merges over a compact rank table, bpe.go and ranks.go), or an estimate
// from the text's length (Approx). Each is a Counter; package budget picks
// one per model, caches its counts and calibrates them against what the
// backend reports.
package tokenizer
