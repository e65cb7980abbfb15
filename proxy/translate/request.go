package translate

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/semver"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// RequestOptions tune Request. The zero value sends what Ollama's own /v1
// endpoint would, plus nothing for num_ctx.
type RequestOptions struct {
	// NumCtx is the context window to ask Ollama for (options.num_ctx), as
	// the proxy's sizer chose it; 0 leaves the client's own (from an
	// "options" extra) or Ollama's default. This is the reason the
	// translation exists: Ollama's /v1 layer has no way to set it (Ollama
	// #5356, #2722).
	NumCtx int
	// ModelSampling leaves temperature and top_p to the model's Modelfile
	// defaults when the client omits them. Without it they are set to 1.0,
	// OpenAI's defaults and what Ollama's own /v1 endpoint sends, so a
	// client sees the same sampling through ctxproxy as without it.
	ModelSampling bool
	// Version is the Ollama server's version ("0.17.4"; "" when unknown:
	// the newest rules), for what its own /v1 layer translates
	// differently from one version to the next (AnthropicThink).
	Version string
	// NoThinking says that the model lacks Ollama's thinking capability.
	// A Messages request that turns thinking on has it dropped, as
	// Ollama's own /v1/messages does so that Claude Code runs on any
	// model; on the other routes the backend's refusal stands.
	NoThinking bool
}

// Info is what the response side needs to know about a translated request,
// and what the translation left out.
type Info struct {
	// Model is the requested model.
	Model string
	// Stream reports whether the client asked for a stream (OpenAI's
	// default is false; Ollama's is true, so the Ollama body always says).
	Stream bool
	// IncludeUsage is stream_options.include_usage: the stream ends with a
	// usage chunk.
	IncludeUsage bool
	// Dropped lists the fields that have no Ollama equivalent and were
	// left out, for the proxy to log at debug level. Null values are
	// treated as absent and not listed.
	Dropped []Drop
}

// Drop is one request field left out of the Ollama request.
type Drop struct {
	// Field is the field's path, such as "logit_bias" or "messages[3].name".
	Field string `json:"field"`
	// Reason says why, in a few words.
	Reason string `json:"reason"`
}

// request holds the raw values of the top-level fields Request reads.
type request struct {
	model, messages, stream, streamOptions                []byte
	temperature, topP, topK, minP, repeatPenalty          []byte
	presencePenalty, frequencyPenalty, seed, stop         []byte
	maxTokens, maxCompletionTokens                        []byte
	tools, toolChoice, responseFormat                     []byte
	reasoningEffort, reasoning, think, keepAlive, options []byte
	logprobs, topLogprobs, n, modalities                  []byte

	// version is the Ollama server's version ("" for the newest rules).
	version string
	// strict names the members that Ollama's own /v1 route of this
	// dialect decodes and checks, so that a bad value is refused there
	// too: ctxproxy answers 400 for those. A bad value of any other
	// member (one Ollama's route ignores, or one of Ollama's extras that
	// ctxproxy honours) is dropped, as Ollama would answer 200 (lenient).
	strict map[string]bool
}

// chatStrict are the chat completions members Ollama's /v1 decodes
// (ChatCompletionRequest, 0.17.4 to 0.34.3): a value of the wrong type
// is its 400 too.
var chatStrict = map[string]bool{
	"model": true, "messages": true, "stream": true, "stream_options": true,
	"max_tokens": true, "seed": true, "temperature": true, "top_p": true,
	"frequency_penalty": true, "presence_penalty": true, "response_format": true,
	"tools": true, "reasoning": true, "reasoning_effort": true,
	"logprobs": true, "top_logprobs": true,
}

// lenient turns e into a drop when e's member is one Ollama's own /v1
// route ignores (see request.strict), and returns e otherwise.
func (r *request) lenient(info *Info, e *Error) error {
	root := e.Param
	if i := strings.IndexAny(root, ".["); i >= 0 {
		root = root[:i]
	}
	if r.strict[root] {
		return e
	}
	info.Dropped = append(info.Dropped, Drop{Field: e.Param, Reason: e.Message + "; left out, as Ollama's own /v1 ignores it"})
	return nil
}

// atLeast reports whether the Ollama version is min or newer; an unknown
// version ("") is the newest.
func atLeast(version, min string) bool {
	return version == "" || semver.Compare("v"+version, "v"+min) >= 0
}

// dropReasons are the OpenAI fields Request leaves out on purpose, with why.
var dropReasons = map[string]string{
	"logit_bias":          "Ollama has no token biasing",
	"user":                "Ollama has no end-user id",
	"safety_identifier":   "Ollama has no end-user id",
	"prompt_cache_key":    "Ollama caches prompts by prefix on its own",
	"parallel_tool_calls": "Ollama cannot limit tool calls per turn",
	"service_tier":        "Ollama has no service tiers",
	"store":               "Ollama stores nothing",
	"metadata":            "Ollama stores nothing",
	"prediction":          "Ollama has no predicted outputs",
	"web_search_options":  "Ollama has no web search",
	"verbosity":           "Ollama has no verbosity control",
	"audio":               "Ollama has no audio output",
	"functions":           "the legacy function API, which Ollama's /v1 ignores too; send tools",
	"function_call":       "the legacy function API, which Ollama's /v1 ignores too; send tool_choice",
}

// Request translates an OpenAI chat completion request body into an Ollama
// /api/chat request body. The proxy calls it on the (already rewritten)
// body of a POST /v1/chat/completions bound for an Ollama backend, forwards
// the result to /api/chat, and keeps the Info for the response side.
//
// Input Ollama's own /v1/chat/completions refuses too (malformed JSON, a
// member it decodes sent with the wrong type, an http image URL, an
// unknown reasoning effort) returns a *Error with status 400, ready to
// send; never a request Ollama's /v1 would answer. Fields with no Ollama
// equivalent, or that Ollama's /v1 ignores (n, tool_choice, the legacy
// functions), are dropped and listed in Info.Dropped; FIELDS.md has the
// table of every field and what happens to it.
func Request(body []byte, opts RequestOptions) ([]byte, Info, error) {
	var info Info
	v, err := jsonscan.Valid(body)
	if err != nil {
		return nil, info, invalid("", "", "the request body is not valid JSON")
	}
	if jsonscan.KindOf(v) != jsonscan.KindObject {
		return nil, info, invalid("", codeInvalidType, "the request body must be a JSON object")
	}
	r := request{version: opts.Version, strict: chatStrict}
	err = jsonscan.Members(v, func(key, val []byte) error {
		if jsonscan.KindOf(val) == jsonscan.KindNull {
			return nil // null means absent, as OpenAI treats it
		}
		k := keyBytes(key)
		switch string(k) {
		case "model":
			r.model = val
		case "messages":
			r.messages = val
		case "stream":
			r.stream = val
		case "stream_options":
			r.streamOptions = val
		case "temperature":
			r.temperature = val
		case "top_p":
			r.topP = val
		case "top_k":
			r.topK = val
		case "min_p":
			r.minP = val
		case "repeat_penalty":
			r.repeatPenalty = val
		case "presence_penalty":
			r.presencePenalty = val
		case "frequency_penalty":
			r.frequencyPenalty = val
		case "seed":
			r.seed = val
		case "stop":
			r.stop = val
		case "max_tokens":
			r.maxTokens = val
		case "max_completion_tokens":
			r.maxCompletionTokens = val
		case "tools":
			r.tools = val
		case "tool_choice":
			r.toolChoice = val
		case "response_format":
			r.responseFormat = val
		case "reasoning_effort":
			r.reasoningEffort = val
		case "reasoning":
			r.reasoning = val
		case "think":
			r.think = val
		case "keep_alive":
			r.keepAlive = val
		case "options":
			r.options = val
		case "logprobs":
			r.logprobs = val
		case "top_logprobs":
			r.topLogprobs = val
		case "n":
			r.n = val
		case "modalities":
			r.modalities = val
		default:
			reason, ok := dropReasons[string(k)]
			if !ok {
				reason = "not an OpenAI chat field ctxproxy translates"
			}
			info.Dropped = append(info.Dropped, Drop{Field: string(k), Reason: reason})
		}
		return nil
	})
	if err != nil {
		return nil, info, invalid("", "", "the request body is not valid JSON")
	}
	out, err := r.translate(make([]byte, 0, len(body)+256), opts, &info)
	if err != nil {
		return nil, info, err
	}
	return out, info, nil
}

// translate checks the fields and writes the Ollama request.
func (r *request) translate(dst []byte, opts RequestOptions, info *Info) ([]byte, error) {
	r.dropUnsupported(info)

	if err := checkModel(r.model, info); err != nil {
		return nil, err
	}
	if err := checkStream(r.stream, info); err != nil {
		return nil, err
	}
	if r.streamOptions != nil {
		include, err := r.includeUsage(info)
		if err != nil {
			return nil, err
		}
		info.IncludeUsage = include && info.Stream
	}

	dst = append(dst, `{"model":`...)
	dst = append(dst, r.model...)
	dst = append(dst, `,"messages":`...)
	var err error
	if dst, err = appendMessages(dst, r.messages, r.version, info); err != nil {
		return nil, err
	}
	dst = appendStreamFlag(dst, info.Stream)

	if dst, err = r.appendFormat(dst, info); err != nil {
		return nil, err
	}
	if dst, err = r.appendTools(dst, info); err != nil {
		return nil, err
	}
	if dst, err = r.appendThink(dst, info); err != nil {
		return nil, err
	}
	dst = r.appendKeepAlive(dst, info)
	if r.logprobs != nil {
		if jsonscan.KindOf(r.logprobs) != jsonscan.KindBool {
			return nil, invalid("logprobs", codeInvalidType, "logprobs must be a boolean")
		}
		if r.logprobs[0] == 't' {
			dst = append(dst, `,"logprobs":true`...)
		}
	}
	if r.topLogprobs != nil {
		if !isInteger(r.topLogprobs) {
			return nil, invalid("top_logprobs", codeInvalidType, "top_logprobs must be an integer")
		}
		dst = append(dst, `,"top_logprobs":`...)
		dst = append(dst, r.topLogprobs...)
	}
	if dst, err = r.appendOptions(dst, opts, info); err != nil {
		return nil, err
	}
	return append(dst, '}'), nil
}

// dropUnsupported lists what Ollama cannot honour and its own /v1
// ignores: n (Ollama returns one choice) and audio output.
func (r *request) dropUnsupported(info *Info) {
	if r.n != nil && string(r.n) != "1" {
		info.Dropped = append(info.Dropped, Drop{Field: "n", Reason: "Ollama returns a single choice, as its own /v1 does"})
	}
	if r.modalities != nil && string(bytes.Join(bytes.Fields(r.modalities), nil)) != `["text"]` {
		info.Dropped = append(info.Dropped, Drop{Field: "modalities", Reason: "Ollama answers in text only, as its own /v1 does"})
	}
}

func (r *request) includeUsage(info *Info) (bool, error) {
	if jsonscan.KindOf(r.streamOptions) != jsonscan.KindObject {
		return false, invalid("stream_options", codeInvalidType, "stream_options must be an object")
	}
	var include bool
	var bad error
	_ = jsonscan.Members(r.streamOptions, func(key, val []byte) error {
		switch {
		case jsonscan.KindOf(val) == jsonscan.KindNull:
		case jsonscan.KeyIs(key, "include_usage"):
			if jsonscan.KindOf(val) != jsonscan.KindBool {
				bad = invalid("stream_options.include_usage", codeInvalidType, "include_usage must be a boolean")
				return bad
			}
			include = val[0] == 't'
		default:
			info.Dropped = append(info.Dropped, Drop{Field: "stream_options." + jsonscan.KeyName(key), Reason: "no Ollama equivalent"})
		}
		return nil
	})
	return include, bad
}

// keyBytes returns a key token's name without quotes, decoding escapes in
// the rare key that has them.
func keyBytes(key []byte) []byte {
	inner := key[1 : len(key)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return inner
	}
	var s string
	if json.Unmarshal(key, &s) != nil {
		return inner
	}
	return []byte(s)
}

// messagePath is "messages[i]" plus a suffix.
func messagePath(i int, suffix string) string {
	var b strings.Builder
	b.WriteString("messages[")
	b.WriteString(strconv.Itoa(i))
	b.WriteByte(']')
	b.WriteString(suffix)
	return b.String()
}

// appendKeepAlive carries keep_alive, a duration string or a number of
// seconds, as it was sent; every dialect has it with Ollama's meaning. A
// value /api/chat would not read is dropped: Ollama's own /v1 ignores
// keep_alive.
func (r *request) appendKeepAlive(dst []byte, info *Info) []byte {
	if r.keepAlive == nil {
		return dst
	}
	ok := jsonscan.KindOf(r.keepAlive) == jsonscan.KindNumber
	if jsonscan.KindOf(r.keepAlive) == jsonscan.KindString {
		_, err := time.ParseDuration(str(r.keepAlive))
		ok = err == nil
	}
	if !ok {
		info.Dropped = append(info.Dropped, Drop{Field: "keep_alive", Reason: "not a duration string or a number of seconds; left out, as Ollama's own /v1 ignores it"})
		return dst
	}
	return append(append(dst, `,"keep_alive":`...), r.keepAlive...)
}
