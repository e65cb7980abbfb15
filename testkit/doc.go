// Package testkit is the root of ctxproxy's test harnesses, kept apart
// from the libraries under internal/: a fake backend that speaks Ollama's
// and OpenAI's dialects (fakebackend), the proxy wired as "ctxproxy serve"
// wires it, in process (proxytest), generated vocabularies and GGUF models
// for the real Ollama (vocabgen, ggufgen), a headless browser for the
// status page (headless), throwaway redis-server processes for the Redis
// store and replicas (redistest), the replay of a long chat against the
// real Ollama that measures its prompt cache under each strategy (replay),
// several real Ollama servers behind one ctxproxy with concurrent chat
// sessions replayed through it (fleetbench), and the check of the codebase's own shape (house). Nothing in the
// product imports them.
package testkit
