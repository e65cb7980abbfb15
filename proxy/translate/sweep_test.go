package translate

import (
	"encoding/json"
	"errors"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
)

// The sweep: every request field the official APIs define (and the ones
// the coding agents send), one at a time on a realistic request, through
// the three translations. The rule it checks: ctxproxy answers a 400 of
// its own only where Ollama's own /v1 route refuses the same request too.
// refuses records what Ollama v0.17.4 and v0.34.3 answered, measured by
// running their own /v1 middlewares (ChatMiddleware, ResponsesMiddleware,
// AnthropicMessagesMiddleware from the module cache, in a program of its
// own outside this module, since one module builds with one Ollama; the
// body they hand on then decoded as api.ChatRequest, as /api/chat
// decodes it) on the bodies `SWEEP_DUMP=file go test -run Sweep` writes,
// one JSON line {name, route, body, ctxproxy} each. What /api/chat
// refuses later for the model (no tools or thinking capability) is the
// same either way and not measured.

// Who refuses a case on Ollama's own /v1 route.
const (
	okBoth  = ""     // both versions answer 200
	refOld  = "old"  // 0.17.4 refuses, 0.34.3 answers
	refNew  = "new"  // 0.34.3 refuses, 0.17.4 answers
	refBoth = "both" // both refuse
)

type sweepCase struct {
	name string
	// set replaces (or adds) top-level members: name → raw JSON.
	set     map[string]string
	refuses string
}

func set(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

// field is a case that sets one top-level member.
func field(name, key, val, refuses string) sweepCase {
	return sweepCase{name: name, set: set(key, val), refuses: refuses}
}

// chat completions, as opencode, Qwen Code and Continue send it.
const (
	chatSystem    = `{"role":"system","content":"You are a coding assistant."}`
	chatUser      = `{"role":"user","content":"List the files"}`
	chatCall      = `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"ls","arguments":"{\"path\":\".\"}"}}]}`
	chatResult    = `{"role":"tool","tool_call_id":"call_1","content":"a.go\nb.go"}`
	chatLast      = `{"role":"user","content":[{"type":"text","text":"Explain a.go"}]}`
	chatTool      = `{"type":"function","function":{"name":"ls","description":"List files","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}}`
	chatBase      = `{"model":"qwen3","stream":true,"messages":[` + chatSystem + `,` + chatUser + `,` + chatCall + `,` + chatResult + `,` + chatLast + `],"tools":[` + chatTool + `]}`
	chatImageData = `data:image/png;base64,iVBORw0KGgo=`
)

// chatWith is the base conversation with one more message at the end.
func chatWith(msg string) string {
	return `[` + chatSystem + `,` + chatUser + `,` + chatCall + `,` + chatResult + `,` + msg + `]`
}

// chatPart is the base conversation whose last user message has one more part.
func chatPart(part string) string {
	return chatWith(`{"role":"user","content":[{"type":"text","text":"Look"},` + part + `]}`)
}

func chatTools(extra string) string { return `[` + chatTool + `,` + extra + `]` }

var chatSweep = []sweepCase{
	field("store", "store", `true`, okBoth),
	field("metadata", "metadata", `{"app":"x"}`, okBoth),
	field("prompt_cache_key", "prompt_cache_key", `"ses_1"`, okBoth),
	field("prompt_cache_retention", "prompt_cache_retention", `"24h"`, okBoth),
	field("safety_identifier", "safety_identifier", `"u_1"`, okBoth),
	field("user", "user", `"u_1"`, okBoth),
	field("parallel_tool_calls", "parallel_tool_calls", `false`, okBoth),
	field("service_tier", "service_tier", `"flex"`, okBoth),
	field("verbosity", "verbosity", `"low"`, okBoth),
	field("web_search_options", "web_search_options", `{"search_context_size":"low"}`, okBoth),
	field("logit_bias", "logit_bias", `{"50256":-100}`, okBoth),
	field("prediction", "prediction", `{"type":"content","content":"package main"}`, okBoth),
	field("modalities text", "modalities", `["text"]`, okBoth),
	field("modalities audio", "modalities", `["text","audio"]`, okBoth),
	field("modalities not an array", "modalities", `"text"`, okBoth),
	field("audio", "audio", `{"voice":"alloy","format":"wav"}`, okBoth),
	field("n 1", "n", `1`, okBoth),
	field("n 2", "n", `2`, okBoth),
	field("n string", "n", `"2"`, okBoth),
	field("stream_options", "stream_options", `{"include_usage":true}`, okBoth),
	field("stream_options obfuscation", "stream_options", `{"include_usage":true,"include_obfuscation":false}`, okBoth),
	field("stream_options not an object", "stream_options", `true`, refBoth),
	field("reasoning_effort none", "reasoning_effort", `"none"`, okBoth),
	field("reasoning_effort minimal", "reasoning_effort", `"minimal"`, refOld),
	field("reasoning_effort low", "reasoning_effort", `"low"`, okBoth),
	field("reasoning_effort high", "reasoning_effort", `"high"`, okBoth),
	field("reasoning_effort xhigh", "reasoning_effort", `"xhigh"`, refOld),
	field("reasoning_effort max", "reasoning_effort", `"max"`, refOld),
	field("reasoning_effort ultra", "reasoning_effort", `"ultra"`, refOld),
	field("reasoning_effort empty", "reasoning_effort", `""`, okBoth),
	field("reasoning_effort bogus", "reasoning_effort", `"turbo"`, refBoth),
	field("reasoning_effort number", "reasoning_effort", `1`, refBoth),
	field("reasoning", "reasoning", `{"effort":"high","summary":"auto"}`, okBoth),
	field("reasoning empty effort", "reasoning", `{"effort":""}`, okBoth),
	field("reasoning not an object", "reasoning", `"high"`, refBoth),
	field("seed", "seed", `42`, okBoth),
	field("seed fraction", "seed", `4.2`, refBoth),
	field("logprobs", "logprobs", `true`, okBoth),
	field("logprobs string", "logprobs", `"yes"`, refBoth),
	{name: "top_logprobs", set: set("logprobs", `true`, "top_logprobs", `5`)},
	field("top_logprobs string", "top_logprobs", `"5"`, refBoth),
	field("temperature", "temperature", `0.2`, okBoth),
	field("temperature string", "temperature", `"hot"`, refBoth),
	field("top_p", "top_p", `0.9`, okBoth),
	field("presence_penalty", "presence_penalty", `0.5`, okBoth),
	field("frequency_penalty", "frequency_penalty", `0.5`, okBoth),
	field("max_tokens", "max_tokens", `1024`, okBoth),
	field("max_tokens fraction", "max_tokens", `10.5`, refBoth),
	field("max_completion_tokens", "max_completion_tokens", `1024`, okBoth),
	field("max_completion_tokens string", "max_completion_tokens", `"1024"`, okBoth),
	field("stop string", "stop", `"\n\n"`, okBoth),
	field("stop array", "stop", `["END","STOP"]`, okBoth),
	field("stop empty", "stop", `[]`, okBoth),
	field("stop number", "stop", `5`, okBoth),
	field("stop mixed", "stop", `["END",5]`, okBoth),
	field("response_format text", "response_format", `{"type":"text"}`, okBoth),
	field("response_format json_object", "response_format", `{"type":"json_object"}`, okBoth),
	field("response_format json_schema", "response_format", `{"type":"json_schema","json_schema":{"name":"out","strict":true,"schema":{"type":"object","properties":{"a":{"type":"string"}}}}}`, okBoth),
	field("response_format json_schema without schema", "response_format", `{"type":"json_schema","json_schema":{"name":"out"}}`, okBoth),
	field("response_format upper case", "response_format", `{"type":"JSON_OBJECT"}`, okBoth),
	field("response_format unknown type", "response_format", `{"type":"grammar","grammar":"root ::= x"}`, okBoth),
	field("response_format no type", "response_format", `{}`, okBoth),
	field("response_format string", "response_format", `"json"`, refBoth),
	field("tool_choice auto", "tool_choice", `"auto"`, okBoth),
	field("tool_choice none", "tool_choice", `"none"`, okBoth),
	field("tool_choice required", "tool_choice", `"required"`, okBoth),
	field("tool_choice function", "tool_choice", `{"type":"function","function":{"name":"ls"}}`, okBoth),
	field("tool_choice unknown function", "tool_choice", `{"type":"function","function":{"name":"rm"}}`, okBoth),
	field("tool_choice allowed_tools", "tool_choice", `{"type":"allowed_tools","allowed_tools":{"mode":"auto","tools":[{"type":"function","function":{"name":"ls"}}]}}`, okBoth),
	field("tool_choice custom", "tool_choice", `{"type":"custom","custom":{"name":"apply_patch"}}`, okBoth),
	field("tool_choice bogus string", "tool_choice", `"always"`, okBoth),
	field("tool_choice number", "tool_choice", `1`, okBoth),
	{name: "tool_choice required without tools", set: set("tool_choice", `"required"`, "tools", `[]`)},
	field("tools custom", "tools", chatTools(`{"type":"custom","custom":{"name":"apply_patch","description":"Patch","format":{"type":"grammar","syntax":"lark","definition":"start: x"}}}`), okBoth),
	field("tools web_search", "tools", chatTools(`{"type":"web_search_preview"}`), okBoth),
	field("tools function without name", "tools", chatTools(`{"type":"function","function":{"description":"x"}}`), okBoth),
	field("tools strict", "tools", `[{"type":"function","function":{"name":"ls","strict":true,"parameters":{"type":"object","properties":{}}}}]`, okBoth),
	field("tools not an array", "tools", `{}`, refBoth),
	field("tools function not an object", "tools", chatTools(`{"type":"function","function":"ls"}`), refBoth),
	field("tools without type", "tools", chatTools(`{"function":{"name":"cat","parameters":{"type":"object","properties":{}}}}`), okBoth),
	field("functions", "functions", `[{"name":"ls","parameters":{"type":"object","properties":{}}}]`, okBoth),
	field("function_call", "function_call", `"auto"`, okBoth),
	field("function_call named", "function_call", `{"name":"ls"}`, okBoth),
	field("think", "think", `true`, okBoth),
	field("think level", "think", `"high"`, okBoth),
	field("think bogus", "think", `"turbo"`, okBoth),
	field("keep_alive", "keep_alive", `"5m"`, okBoth),
	field("keep_alive bogus", "keep_alive", `"soon"`, okBoth),
	field("keep_alive bool", "keep_alive", `true`, okBoth),
	field("options", "options", `{"num_ctx":8192,"top_k":20}`, okBoth),
	field("options not an object", "options", `"fast"`, okBoth),
	field("top_k", "top_k", `20`, okBoth),
	field("top_k string", "top_k", `"20"`, okBoth),
	field("min_p string", "min_p", `"0.1"`, okBoth),
	field("repeat_penalty", "repeat_penalty", `1.1`, okBoth),
	// Messages.
	field("developer role", "messages", chatWith(`{"role":"developer","content":"Be brief."}`), okBoth),
	field("function role", "messages", chatWith(`{"role":"function","name":"ls","content":"a.go"}`), okBoth),
	field("unknown role", "messages", chatWith(`{"role":"critic","content":"Looks fine."}`), okBoth),
	field("missing role", "messages", chatWith(`{"content":"hello"}`), okBoth),
	field("role number", "messages", chatWith(`{"role":1,"content":"hello"}`), refBoth),
	field("user name", "messages", chatWith(`{"role":"user","name":"alice","content":"hello"}`), okBoth),
	field("assistant legacy function_call", "messages", chatWith(`{"role":"assistant","content":null,"function_call":{"name":"ls","arguments":"{}"}}`), refBoth),
	field("assistant function_call beside content", "messages", chatWith(`{"role":"assistant","content":"ok","function_call":{"name":"ls","arguments":"{}"}}`), okBoth),
	field("assistant refusal", "messages", chatWith(`{"role":"assistant","content":"no","refusal":"I cannot"}`), okBoth),
	field("assistant audio", "messages", chatWith(`{"role":"assistant","content":"hi","audio":{"id":"audio_1"}}`), okBoth),
	field("assistant annotations", "messages", chatWith(`{"role":"assistant","content":"hi","annotations":[]}`), okBoth),
	field("assistant reasoning_content", "messages", chatWith(`{"role":"assistant","content":"hi","reasoning_content":"thought"}`), okBoth),
	field("assistant reasoning_content number", "messages", chatWith(`{"role":"assistant","content":"hi","reasoning_content":5}`), okBoth),
	field("assistant thinking object", "messages", chatWith(`{"role":"assistant","content":"hi","thinking":{"text":"x"}}`), okBoth),
	field("assistant reasoning number", "messages", chatWith(`{"role":"assistant","content":"hi","reasoning":5}`), refBoth),
	field("tool call custom type", "messages", chatWith(`{"role":"assistant","content":"","tool_calls":[{"id":"call_2","type":"custom","function":{"name":"ls","arguments":"{}"}}]}`), okBoth),
	field("tool call without type", "messages", chatWith(`{"role":"assistant","content":"","tool_calls":[{"id":"call_2","function":{"name":"ls","arguments":"{}"}}]}`), okBoth),
	field("tool call without name", "messages", chatWith(`{"role":"assistant","content":"","tool_calls":[{"id":"call_2","type":"function","function":{"arguments":"{}"}}]}`), okBoth),
	field("tool calls on a user message", "messages", chatWith(`{"role":"user","content":"x","tool_calls":[{"id":"call_2","type":"function","function":{"name":"ls","arguments":"{}"}}]}`), okBoth),
	field("tool calls without content on a tool message", "messages", chatWith(`{"role":"tool","tool_calls":[{"id":"call_2","type":"function","function":{"name":"ls","arguments":"{}"}}]}`), okBoth),
	field("user content null", "messages", chatWith(`{"role":"user","content":null}`), refBoth),
	field("assistant content null", "messages", chatWith(`{"role":"assistant","content":null}`), refBoth),
	field("tool message with name", "messages", chatWith(`{"role":"tool","tool_call_id":"call_1","name":"ls","content":"x"}`), okBoth),
	field("part image", "messages", chatPart(`{"type":"image_url","image_url":{"url":"`+chatImageData+`","detail":"high"}}`), okBoth),
	field("part image http", "messages", chatPart(`{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}`), refBoth),
	field("part image gif", "messages", chatPart(`{"type":"image_url","image_url":{"url":"data:image/gif;base64,R0lGODlh"}}`), refBoth),
	field("part input_audio", "messages", chatPart(`{"type":"input_audio","input_audio":{"data":"UklGRg==","format":"wav"}}`), refOld),
	field("part file", "messages", chatPart(`{"type":"file","file":{"file_data":"data:application/pdf;base64,JVBERg==","filename":"a.pdf"}}`), refBoth),
	field("part refusal", "messages", chatWith(`{"role":"assistant","content":[{"type":"refusal","refusal":"I cannot"}]}`), refBoth),
	field("part unknown type", "messages", chatPart(`{"type":"input_text","text":"x"}`), refBoth),
	field("tool call arguments not JSON", "messages", chatWith(`{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"ls","arguments":"{x"}}]}`), refBoth),
	field("tool call arguments empty", "messages", chatWith(`{"role":"assistant","content":"","tool_calls":[{"id":"c","type":"function","function":{"name":"ls","arguments":""}}]}`), refBoth),
	field("part text without text", "messages", chatPart(`{"type":"text"}`), refBoth),
	field("image_url without url", "messages", chatPart(`{"type":"image_url","image_url":{}}`), refBoth),
	field("message not an object", "messages", chatWith(`"hi"`), refBoth),
	field("part text with cache_control", "messages", chatPart(`{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}`), okBoth),
}

// Responses, as Codex sends it.
const (
	respItems = `{"type":"message","role":"developer","content":[{"type":"input_text","text":"<permissions>"}]},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"List the files"}]},` +
		`{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"I should list."}],"content":null,"encrypted_content":"gAAAA"},` +
		`{"type":"function_call","id":"fc_1","call_id":"call_1","name":"shell","arguments":"{\"command\":[\"ls\"]}"},` +
		`{"type":"function_call_output","call_id":"call_1","output":"a.go\nb.go"},` +
		`{"type":"message","role":"assistant","id":"msg_1","content":[{"type":"output_text","text":"a.go and b.go","annotations":[]}]}`
	respLast = `{"type":"message","role":"user","content":[{"type":"input_text","text":"Explain a.go"}]}`
	respTool = `{"type":"function","name":"shell","description":"Runs a command","strict":false,"parameters":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}}},"required":["command"]}}`
	respBase = `{"model":"qwen3","instructions":"You are Codex.","stream":true,"input":[` + respItems + `,` + respLast + `],"tools":[` + respTool + `]}`
)

func respWith(item string) string { return `[` + respItems + `,` + item + `]` }

func respTools(extra string) string { return `[` + respTool + `,` + extra + `]` }

var responsesSweep = []sweepCase{
	field("include", "include", `["reasoning.encrypted_content"]`, okBoth),
	field("store", "store", `false`, okBoth),
	field("prompt_cache_key", "prompt_cache_key", `"019a-session"`, okBoth),
	field("prompt_cache_retention", "prompt_cache_retention", `"24h"`, okBoth),
	field("reasoning", "reasoning", `{"effort":"medium","summary":"auto"}`, okBoth),
	field("reasoning minimal", "reasoning", `{"effort":"minimal"}`, okBoth),
	field("reasoning xhigh", "reasoning", `{"effort":"xhigh"}`, okBoth),
	field("reasoning max", "reasoning", `{"effort":"max"}`, okBoth),
	field("reasoning none", "reasoning", `{"effort":"none"}`, okBoth),
	field("reasoning empty", "reasoning", `{}`, okBoth),
	field("reasoning bogus", "reasoning", `{"effort":"turbo"}`, refNew),
	field("reasoning generate_summary", "reasoning", `{"effort":"low","generate_summary":"concise"}`, okBoth),
	field("parallel_tool_calls", "parallel_tool_calls", `true`, okBoth),
	field("tool_choice auto", "tool_choice", `"auto"`, okBoth),
	field("tool_choice none", "tool_choice", `"none"`, okBoth),
	field("tool_choice required", "tool_choice", `"required"`, okBoth),
	field("tool_choice function", "tool_choice", `{"type":"function","name":"shell"}`, okBoth),
	field("tool_choice unknown function", "tool_choice", `{"type":"function","name":"rm"}`, okBoth),
	field("tool_choice allowed_tools", "tool_choice", `{"type":"allowed_tools","mode":"auto","tools":[{"type":"function","name":"shell"}]}`, okBoth),
	field("tool_choice hosted", "tool_choice", `{"type":"web_search_preview"}`, okBoth),
	field("tool_choice custom", "tool_choice", `{"type":"custom","name":"apply_patch"}`, okBoth),
	field("tool_choice mcp", "tool_choice", `{"type":"mcp","server_label":"deepwiki"}`, okBoth),
	field("tool_choice bogus", "tool_choice", `"always"`, okBoth),
	field("text format text", "text", `{"format":{"type":"text"},"verbosity":"low"}`, okBoth),
	field("text format json_object", "text", `{"format":{"type":"json_object"}}`, okBoth),
	field("text format json_schema", "text", `{"format":{"type":"json_schema","name":"out","strict":true,"schema":{"type":"object","properties":{"a":{"type":"string"}}}}}`, okBoth),
	field("text format unknown", "text", `{"format":{"type":"grammar"}}`, okBoth),
	field("text format no type", "text", `{"format":{}}`, okBoth),
	field("text verbosity", "text", `{"verbosity":"medium"}`, okBoth),
	field("truncation auto", "truncation", `"auto"`, okBoth),
	field("truncation disabled", "truncation", `"disabled"`, okBoth),
	field("service_tier", "service_tier", `"auto"`, okBoth),
	field("safety_identifier", "safety_identifier", `"u_1"`, okBoth),
	field("user", "user", `"u_1"`, okBoth),
	field("metadata", "metadata", `{"k":"v"}`, okBoth),
	field("max_tool_calls", "max_tool_calls", `8`, okBoth),
	field("top_logprobs", "top_logprobs", `3`, okBoth),
	field("stream_options", "stream_options", `{"include_obfuscation":false}`, okBoth),
	field("client_metadata", "client_metadata", `{"x-codex-turn-metadata":"{}"}`, okBoth),
	field("max_output_tokens", "max_output_tokens", `2048`, okBoth),
	field("temperature", "temperature", `0.3`, okBoth),
	field("top_p", "top_p", `0.8`, okBoth),
	field("seed", "seed", `7`, okBoth),
	field("background false", "background", `false`, okBoth),
	field("background true", "background", `true`, okBoth),
	field("previous_response_id", "previous_response_id", `"resp_1"`, okBoth),
	field("conversation", "conversation", `"conv_1"`, okBoth),
	field("prompt", "prompt", `{"id":"pmpt_1"}`, okBoth),
	field("think extra", "think", `"low"`, okBoth),
	field("tools web_search", "tools", respTools(`{"type":"web_search","external_web_access":false}`), okBoth),
	field("tools custom", "tools", respTools(`{"type":"custom","name":"apply_patch","description":"Patch","format":{"type":"grammar","syntax":"lark","definition":"start: x"}}`), okBoth),
	field("tools local_shell", "tools", respTools(`{"type":"local_shell"}`), okBoth),
	field("tools namespace", "tools", respTools(`{"type":"namespace","name":"mcp__fs","description":"fs","tools":[{"type":"function","name":"read","parameters":{"type":"object","properties":{}}}]}`), okBoth),
	field("tools file_search", "tools", respTools(`{"type":"file_search","vector_store_ids":["vs_1"]}`), okBoth),
	field("tools mcp", "tools", respTools(`{"type":"mcp","server_label":"deepwiki","server_url":"https://mcp.deepwiki.com/mcp"}`), okBoth),
	field("tools image_generation", "tools", respTools(`{"type":"image_generation"}`), okBoth),
	field("input string", "input", `"hello"`, okBoth),
	field("item_reference", "input", respWith(`{"type":"item_reference","id":"msg_0"}`), refBoth),
	field("web_search_call", "input", respWith(`{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"go"}}`), refOld),
	field("local_shell_call", "input", respWith(`{"type":"local_shell_call","id":"lsh_1","call_id":"call_9","status":"completed","action":{"type":"exec","command":["ls"],"env":{}}}`), refBoth),
	field("local_shell_call_output", "input", respWith(`{"type":"local_shell_call_output","id":"call_9","output":"a.go"}`), refBoth),
	field("custom_tool_call", "input", respWith(`{"type":"custom_tool_call","call_id":"call_8","name":"apply_patch","input":"*** Begin Patch"}`), refBoth),
	field("custom_tool_call_output", "input", respWith(`{"type":"custom_tool_call_output","call_id":"call_8","output":"done"}`), refBoth),
	field("compaction", "input", respWith(`{"type":"compaction","encrypted_content":"gAAAA"}`), refBoth),
	field("message system role", "input", respWith(`{"type":"message","role":"system","content":"Be brief."}`), okBoth),
	field("message unknown role", "input", respWith(`{"type":"message","role":"critic","content":"Fine."}`), okBoth),
	field("message without type", "input", respWith(`{"role":"user","content":"hi"}`), okBoth),
	field("input_image data", "input", respWith(`{"type":"message","role":"user","content":[{"type":"input_image","image_url":"`+chatImageData+`","detail":"auto"}]}`), okBoth),
	field("input_image http", "input", respWith(`{"type":"message","role":"user","content":[{"type":"input_image","image_url":"https://example.com/a.png"}]}`), refBoth),
	field("input_image file_id", "input", respWith(`{"type":"message","role":"user","content":[{"type":"input_image","file_id":"file_1"}]}`), okBoth),
	field("input_file", "input", respWith(`{"type":"message","role":"user","content":[{"type":"input_file","file_id":"file_1"}]}`), refBoth),
	field("function_call_output parts", "input", respWith(`{"type":"function_call_output","call_id":"call_1","output":[{"type":"input_text","text":"a.go"}]}`), refOld),
	field("function_call without name", "input", respWith(`{"type":"function_call","call_id":"call_7","arguments":"{}"}`), okBoth),
	field("function_call_output without call_id", "input", respWith(`{"type":"function_call_output","output":"x"}`), refNew),
	field("agent_message", "input", respWith(`{"type":"agent_message","author":"/root","recipient":"/root/worker","content":[{"type":"input_text","text":"analyze"}]}`), refOld),
	field("tool_search_call", "input", respWith(`{"type":"tool_search_call","call_id":"call_6","arguments":{"query":"fs"}}`), refOld),
	field("tool_search_output", "input", respWith(`{"type":"tool_search_output","call_id":"call_6","tools":[]}`), refOld),
	field("message without role", "input", respWith(`{"type":"message","content":"hi"}`), okBoth),
	field("tools function without name", "tools", respTools(`{"type":"function","parameters":{"type":"object","properties":{}}}`), okBoth),
	field("text format json_schema string schema", "text", `{"format":{"type":"json_schema","name":"x","schema":""}}`, okBoth),
	field("instructions not a string", "instructions", `["x"]`, refBoth),
	field("message item without content", "input", respWith(`{"type":"message","role":"user"}`), okBoth),
	field("part without type", "input", respWith(`{"type":"message","role":"user","content":[{"text":"x"}]}`), refBoth),
	field("part unknown type", "input", respWith(`{"type":"message","role":"user","content":[{"type":"input_video","url":"x"}]}`), refBoth),
	field("input_text without text", "input", respWith(`{"type":"message","role":"user","content":[{"type":"input_text"}]}`), okBoth),
	field("item without type", "input", respWith(`{"content":"x"}`), refBoth),
	field("function_call bad arguments", "input", respWith(`{"type":"function_call","call_id":"c","name":"shell","arguments":"{x"}`), refBoth),
	field("input missing", "input", `null`, okBoth),
	field("reasoning with content", "input", respWith(`{"type":"reasoning","summary":[],"content":[{"type":"reasoning_text","text":"hmm"}]}`), okBoth),
}

// Messages, as Claude Code sends it.
const (
	msgSystem = `[{"type":"text","text":"You are Claude Code.","cache_control":{"type":"ephemeral"}}]`
	msgUser   = `{"role":"user","content":[{"type":"text","text":"List the files"}]}`
	msgCall   = `{"role":"assistant","content":[{"type":"thinking","thinking":"I should list.","signature":"EqQB"},{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"ls"}}]}`
	msgResult = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"a.go"},{"type":"text","text":"Explain a.go","cache_control":{"type":"ephemeral"}}]}`
	msgTool   = `{"name":"Bash","description":"Runs a command","input_schema":{"type":"object","properties":{"command":{"type":"string"}},"required":["command"]}}`
	msgBase   = `{"model":"qwen3","max_tokens":32000,"stream":true,"system":` + msgSystem + `,"messages":[` + msgUser + `,` + msgCall + `,` + msgResult + `],"tools":[` + msgTool + `],"metadata":{"user_id":"user_abc_session_1"}}`
)

func msgWith(m string) string { return `[` + msgUser + `,` + msgCall + `,` + msgResult + `,` + m + `]` }

// msgBlock is the base conversation with one more user message holding block.
func msgBlock(block string) string {
	return msgWith(`{"role":"assistant","content":"Done."},{"role":"user","content":[{"type":"text","text":"Look"},` + block + `]}`)
}

func msgTools(extra string) string { return `[` + msgTool + `,` + extra + `]` }

var messagesSweep = []sweepCase{
	field("metadata", "metadata", `{"user_id":"u"}`, okBoth),
	field("cache_control", "cache_control", `{"type":"ephemeral"}`, okBoth),
	field("container", "container", `"container_1"`, okBoth),
	field("context_management", "context_management", `{"edits":[{"type":"clear_tool_uses_20250919"}]}`, okBoth),
	field("service_tier", "service_tier", `"auto"`, okBoth),
	field("mcp_servers", "mcp_servers", `[{"type":"url","url":"https://mcp.example.com","name":"ex"}]`, okBoth),
	field("output_config effort", "output_config", `{"effort":"high"}`, okBoth),
	field("output_config format", "output_config", `{"format":{"type":"json_schema","schema":{"type":"object"}}}`, okBoth),
	field("output_format", "output_format", `{"type":"json_schema","schema":{"type":"object"}}`, okBoth),
	field("inference_geo", "inference_geo", `"us"`, okBoth),
	field("temperature", "temperature", `1`, okBoth),
	field("top_p", "top_p", `0.9`, okBoth),
	field("top_k", "top_k", `5`, okBoth),
	field("stop_sequences", "stop_sequences", `["\n\nHuman:"]`, okBoth),
	field("thinking enabled", "thinking", `{"type":"enabled","budget_tokens":10000}`, okBoth),
	field("thinking disabled", "thinking", `{"type":"disabled"}`, okBoth),
	field("thinking adaptive", "thinking", `{"type":"adaptive"}`, okBoth),
	field("thinking not an object", "thinking", `"on"`, refBoth),
	field("tool_choice auto", "tool_choice", `{"type":"auto","disable_parallel_tool_use":true}`, okBoth),
	field("tool_choice any", "tool_choice", `{"type":"any"}`, okBoth),
	field("tool_choice tool", "tool_choice", `{"type":"tool","name":"Bash"}`, okBoth),
	field("tool_choice unknown tool", "tool_choice", `{"type":"tool","name":"Rm"}`, okBoth),
	field("tool_choice none", "tool_choice", `{"type":"none"}`, okBoth),
	field("tool_choice tool without name", "tool_choice", `{"type":"tool"}`, okBoth),
	field("tool_choice bogus", "tool_choice", `{"type":"sometimes"}`, okBoth),
	field("tool_choice string", "tool_choice", `"auto"`, refBoth),
	field("tools web_search", "tools", msgTools(`{"type":"web_search_20250305","name":"web_search","max_uses":5}`), okBoth),
	field("tools web_fetch", "tools", msgTools(`{"type":"web_fetch_20250910","name":"web_fetch"}`), okBoth),
	field("tools bash", "tools", msgTools(`{"type":"bash_20250124","name":"bash"}`), okBoth),
	field("tools text_editor", "tools", msgTools(`{"type":"text_editor_20250728","name":"str_replace_based_edit_tool"}`), okBoth),
	field("tools code_execution", "tools", msgTools(`{"type":"code_execution_20250825","name":"code_execution"}`), okBoth),
	field("tools memory", "tools", msgTools(`{"type":"memory_20250818","name":"memory"}`), okBoth),
	field("tools custom typed", "tools", msgTools(`{"type":"custom","name":"Read","input_schema":{"type":"object","properties":{}}}`), okBoth),
	field("tools cache_control", "tools", `[{"name":"Bash","input_schema":{"type":"object","properties":{}},"cache_control":{"type":"ephemeral"}}]`, okBoth),
	field("tools strict", "tools", `[{"name":"Bash","strict":true,"input_schema":{"type":"object","properties":{}}}]`, okBoth),
	field("system string", "system", `"You are Claude Code."`, okBoth),
	field("system entry", "messages", msgWith(`{"role":"system","content":"Reminder."}`), okBoth),
	field("document", "messages", msgBlock(`{"type":"document","source":{"type":"base64","media_type":"application/pdf","data":"JVBERg=="},"cache_control":{"type":"ephemeral"}}`), okBoth),
	field("document text", "messages", msgBlock(`{"type":"document","source":{"type":"text","media_type":"text/plain","data":"hello"},"citations":{"enabled":true}}`), refNew),
	field("search_result", "messages", msgBlock(`{"type":"search_result","source":"https://example.com","title":"x","content":[{"type":"text","text":"y"}]}`), refNew),
	field("container_upload", "messages", msgBlock(`{"type":"container_upload","file_id":"file_1"}`), okBoth),
	field("image base64", "messages", msgBlock(`{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}`), okBoth),
	field("image url", "messages", msgBlock(`{"type":"image","source":{"type":"url","url":"https://example.com/a.png"}}`), refBoth),
	field("text citations", "messages", msgBlock(`{"type":"text","text":"x","citations":[]}`), okBoth),
	field("redacted_thinking", "messages", msgWith(`{"role":"assistant","content":[{"type":"redacted_thinking","data":"EmwK"},{"type":"text","text":"ok"}]}`), okBoth),
	field("thinking with signature", "messages", msgWith(`{"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"EqQB"},{"type":"text","text":"ok"}]}`), okBoth),
	field("server_tool_use", "messages", msgWith(`{"role":"assistant","content":[{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"go"}},{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","title":"Go","url":"https://go.dev","encrypted_content":"x"}]},{"type":"text","text":"Found."}]}`), okBoth),
	field("tool_result is_error", "messages", msgWith(`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"Bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","is_error":true,"content":[{"type":"text","text":"boom"}]}]}`), okBoth),
	field("tool_result document", "messages", msgWith(`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"Bash","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":[{"type":"document","source":{"type":"text","media_type":"text/plain","data":"x"}}]}]}`), okBoth),
	field("tool_use cache_control", "messages", msgWith(`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_2","name":"Bash","input":{},"cache_control":{"type":"ephemeral"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"x","cache_control":{"type":"ephemeral"}}]}`), okBoth),
	field("unknown role", "messages", msgWith(`{"role":"critic","content":"Fine."}`), okBoth),
	// Shapes no client means to send, but Ollama's own route answers some.
	field("message without role", "messages", msgWith(`{"content":"hi"}`), okBoth),
	field("message without content", "messages", msgWith(`{"role":"user"}`), refBoth),
	field("text block without text", "messages", msgBlock(`{"type":"text"}`), okBoth),
	field("block without type", "messages", msgBlock(`{"text":"x"}`), okBoth),
	field("tool_use in a user message", "messages", msgWith(`{"role":"user","content":[{"type":"tool_use","id":"toolu_3","name":"Bash","input":{}}]}`), okBoth),
	field("tool_result in an assistant message", "messages", msgWith(`{"role":"assistant","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"x"}]}`), okBoth),
	field("tool_result without tool_use_id", "messages", msgWith(`{"role":"user","content":[{"type":"tool_result","content":"x"}]}`), okBoth),
	field("tool_use without id", "messages", msgWith(`{"role":"assistant","content":[{"type":"tool_use","name":"Bash","input":{}}]}`), refBoth),
	field("tool_use without name", "messages", msgWith(`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_3","input":{}}]}`), refBoth),
	field("tool_use input a string", "messages", msgWith(`{"role":"assistant","content":[{"type":"tool_use","id":"toolu_3","name":"Bash","input":"ls"}]}`), refNew),
	field("system image block", "system", `[{"type":"text","text":"x"},{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}}]`, okBoth),
	field("tool without name", "tools", msgTools(`{"description":"x","input_schema":{"type":"object"}}`), okBoth),
	field("messages empty", "messages", `[]`, refBoth),
}

// sweepBody is base with the case's members set.
func sweepBody(t *testing.T, base string, c sweepCase) []byte {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(base), &m); err != nil {
		t.Fatal(err)
	}
	for k, v := range c.set {
		if !json.Valid([]byte(v)) {
			t.Fatalf("%s: %s is not valid JSON: %s", c.name, k, v)
		}
		m[k] = json.RawMessage(v)
	}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type sweepDialect struct {
	name, base string
	cases      []sweepCase
	translate  func([]byte, RequestOptions) ([]byte, []Drop, error)
}

var sweepDialects = []sweepDialect{
	{"chat", chatBase, chatSweep, func(b []byte, o RequestOptions) ([]byte, []Drop, error) {
		out, info, err := Request(b, o)
		return out, info.Dropped, err
	}},
	{"responses", respBase, responsesSweep, func(b []byte, o RequestOptions) ([]byte, []Drop, error) {
		out, info, err := ResponsesRequest(b, o)
		return out, info.Dropped, err
	}},
	{"messages", msgBase, messagesSweep, func(b []byte, o RequestOptions) ([]byte, []Drop, error) {
		out, info, err := MessagesRequest(b, o)
		return out, info.Dropped, err
	}},
}

// sweepServerState are the Responses cases ctxproxy refuses on purpose
// although Ollama answers them: they continue state the server keeps,
// which Ollama does not, so Ollama's answer ignores the context the
// client means (FIELDS.md, "previous_response_id and string input").
var sweepServerState = map[string]bool{
	"responses/previous_response_id": true,
	"responses/conversation":         true,
	"responses/prompt":               true,
	"responses/item_reference":       true,
	"responses/background true":      true,
}

// ollamaRequest is /api/chat's request as Ollama decodes it; think is
// kept raw, since the api package this module builds with (0.17.4)
// does not know "max", which newer servers accept.
type ollamaRequest struct {
	api.ChatRequest
	Think json.RawMessage `json:"think,omitempty"`
}

// TestSweepEveryField: no 400 of ctxproxy's own where Ollama's own /v1
// route answers 200, for every field of the three dialects, at both ends
// of the Ollama versions ctxproxy knows; every translation decodes as
// Ollama's /api/chat request.
func TestSweepEveryField(t *testing.T) {
	if path := os.Getenv("SWEEP_DUMP"); path != "" {
		dumpSweep(t, path)
		return
	}
	for _, d := range sweepDialects {
		for _, c := range d.cases {
			name := d.name + "/" + c.name
			body := sweepBody(t, d.base, c)
			for _, version := range []string{"0.17.4", "0.34.3"} {
				refused := c.refuses == refBoth || (c.refuses == refOld && version == "0.17.4") || (c.refuses == refNew && version == "0.34.3")
				out, drops, err := d.translate(body, RequestOptions{Version: version, NumCtx: 8192})
				if err != nil {
					var e *Error
					if !errors.As(err, &e) || e.Status != 400 {
						t.Errorf("%s (Ollama %s): not a 400 *Error: %v", name, version, err)
					}
					if !refused && !sweepServerState[name] {
						t.Errorf("%s (Ollama %s): ctxproxy answers 400 (%v) where Ollama answers 200", name, version, err)
					}
					continue
				}
				if sweepServerState[name] {
					t.Errorf("%s (Ollama %s): translated; want the 400 for server state", name, version)
				}
				var req ollamaRequest
				if err := json.Unmarshal(out, &req); err != nil {
					t.Errorf("%s (Ollama %s): the translation is not an /api/chat request: %v\n%s", name, version, err, out)
					continue
				}
				if req.Model != "qwen3" || len(req.Messages) == 0 || req.Options["num_ctx"] != float64(8192) {
					t.Errorf("%s (Ollama %s): model, messages or num_ctx lost:\n%s", name, version, out)
				}
				for _, drop := range drops {
					if drop.Field == "" || drop.Reason == "" {
						t.Errorf("%s: a drop without field or reason: %+v", name, drop)
					}
				}
			}
		}
	}
}

// dumpSweep writes every case as a JSON line {name, route, body} for the
// harness that runs Ollama's own middlewares.
func dumpSweep(t *testing.T, path string) {
	var lines []string
	for _, d := range sweepDialects {
		for _, c := range d.cases {
			body := sweepBody(t, d.base, c)
			ctxproxy := map[string]string{}
			for _, version := range []string{"0.17.4", "0.34.3"} {
				ctxproxy[version] = "200"
				if _, _, err := d.translate(body, RequestOptions{Version: version}); err != nil {
					ctxproxy[version] = err.Error()
				}
			}
			line, err := json.Marshal(map[string]any{"name": d.name + "/" + c.name, "route": d.name, "body": json.RawMessage(body), "ctxproxy": ctxproxy})
			if err != nil {
				t.Fatal(err)
			}
			lines = append(lines, string(line))
		}
	}
	sort.Strings(lines)
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
