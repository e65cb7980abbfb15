package translate

import (
	"fmt"
	"io"
	"net/http"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// Stream converts Ollama's /api/chat NDJSON stream into OpenAI's
// server-sent events, one line at a time, so the proxy can flush the
// events of each backend chunk before it reads the next.
//
// The events are chat.completion.chunk objects: the role in the first
// delta, then content, reasoning and tool call deltas, then a chunk with
// finish_reason, a usage chunk (choices: []) when the client asked with
// stream_options.include_usage, and "data: [DONE]". Only Ollama's final
// "done": true line produces the finish chunk and [DONE]: a stream that
// breaks off before it must not look complete to the client (see Finish).
//
// A Stream is for one response and is not safe for concurrent use.
type Stream struct {
	info Info
	opts ResponseOptions

	// prefix is `data: {"id":…,"created":…,"choices":[`, the start of
	// every chunk, built from the first line.
	prefix []byte
	// started is set once the role has been sent.
	started bool
	// calls counts the tool calls sent, for their indexes.
	calls int
	state streamState
	// err is the backend error sent to the client, when state is failed.
	err error
}

type streamState int

const (
	running streamState = iota
	done                // the final line was seen
	failed              // an error event was sent
)

// NewStream returns a converter for the stream answering a request that
// Request translated into info.
func NewStream(info Info, opts ResponseOptions) *Stream {
	return &Stream{info: info, opts: opts}
}

// Append converts one line of Ollama's stream and appends the events for it
// to dst. A blank line, or any line after the stream ended, adds nothing.
//
// An Ollama {"error": …} line becomes an OpenAI error event,
// data: {"error":{…}}, which OpenAI clients raise as an error; the stream
// is then over. A line that is not a JSON object returns an error and adds
// nothing: the proxy should stop reading and call Finish.
func (s *Stream) Append(dst, line []byte) ([]byte, error) {
	if s.state != running || len(line) == 0 || jsonscan.SkipSpace(line, 0) == len(line) {
		return dst, nil
	}
	r, err := parseReply(line)
	if err != nil {
		return dst, fmt.Errorf("translate: backend stream line is not a JSON object: %w", err)
	}
	if r.errorMessage != nil {
		e := BackendError(0, line)
		s.state, s.err = failed, e
		return appendErrorEvent(dst, e), nil
	}
	if s.prefix == nil {
		s.prefix = s.chunkPrefix(&r)
	}

	tools := hasToolCalls(r.toolCalls)
	content, thinking := hasText(r.content), hasText(r.thinking)
	logprobs := jsonscan.KindOf(r.logprobs) == jsonscan.KindArray && len(r.logprobs) > 2
	if !s.started || content || thinking || tools || logprobs {
		dst = append(dst, s.prefix...)
		dst = append(dst, `{"index":0,"delta":{`...)
		sep := false
		if !s.started {
			dst = append(dst, `"role":"assistant"`...)
			if !content {
				dst = append(dst, `,"content":""`...)
			}
			s.started, sep = true, true
		}
		if content {
			if sep {
				dst = append(dst, ',')
			}
			dst = append(dst, `"content":`...)
			dst = append(dst, r.content...)
			sep = true
		}
		if thinking {
			if sep {
				dst = append(dst, ',')
			}
			dst = appendReasoning(dst, r.thinking)
			sep = true
		}
		if tools {
			if sep {
				dst = append(dst, ',')
			}
			var n int
			dst, n = appendReplyToolCalls(dst, r.toolCalls, true, s.calls, &s.opts)
			s.calls += n
		}
		dst = append(dst, '}')
		if logprobs {
			dst = append(dst, `,"logprobs":{"content":`...)
			dst = append(dst, r.logprobs...)
			dst = append(dst, '}')
		}
		dst = append(dst, `,"finish_reason":null}]}`+"\n\n"...)
	}
	if !r.done {
		return dst, nil
	}

	s.state = done
	dst = append(dst, s.prefix...)
	dst = append(dst, `{"index":0,"delta":{},"finish_reason":`...)
	dst = jsonscan.AppendString(dst, finishReason(r.doneReason, s.calls > 0))
	dst = append(dst, "}]}\n\n"...)
	if s.info.IncludeUsage {
		dst = append(dst, s.prefix...)
		dst = append(dst, `],"usage":`...)
		dst = r.appendUsage(dst)
		dst = append(dst, "}\n\n"...)
	}
	return append(dst, "data: [DONE]\n\n"...), nil
}

// chunkPrefix builds the start every chunk shares. All chunks carry the id
// and the created time of the first line, as OpenAI's do.
func (s *Stream) chunkPrefix(r *reply) []byte {
	p := make([]byte, 0, 160)
	p = append(p, `data: {"id":`...)
	p = jsonscan.AppendString(p, s.opts.id())
	p = append(p, `,"object":"chat.completion.chunk","created":`...)
	p = jsonscan.AppendInt(p, r.created(&s.opts))
	p = append(p, `,"model":`...)
	p = append(p, r.modelToken(&s.info)...)
	return append(p, `,"system_fingerprint":"fp_ollama","choices":[`...)
}

// appendErrorEvent appends data: {"error":{…}}.
func appendErrorEvent(dst []byte, e *Error) []byte {
	dst = append(dst, "data: "...)
	dst = e.appendObject(dst)
	return append(dst, "\n\n"...)
}

// errCutOff is the event a client gets when Ollama's stream ends early.
var errCutOff = &Error{
	Status:  http.StatusBadGateway,
	Type:    "api_error",
	Code:    codeIncomplete,
	Message: "the backend's stream ended before the answer was complete",
}

// Finish ends the conversion once Ollama's stream has ended (EOF, a read
// error, or a line Append rejected) and reports how it ended:
//
//   - nil: the final "done" line was converted; the client has [DONE].
//   - ErrIncomplete: the stream broke off before it. Finish appends an error
//     event (code "stream_incomplete") so the client sees the answer failed
//     rather than a silently short one, and no finish chunk or [DONE]; the
//     proxy writes it if the client is still there.
//   - a *Error: Ollama sent an error line, already converted into an error
//     event by Append.
//
// Calling Finish again returns the same error and appends nothing.
func (s *Stream) Finish(dst []byte) ([]byte, error) {
	switch s.state {
	case done:
		return dst, nil
	case failed:
		return dst, s.err
	}
	s.state, s.err = failed, ErrIncomplete
	return appendErrorEvent(dst, errCutOff), ErrIncomplete
}

// Copy converts the whole stream from r (Ollama's response body) to w (the
// client), writing and flushing the events of each line before reading the
// next, and returns Finish's result, or the first read or write error. w is
// flushed when it has a Flush() or Flush() error method, as
// http.ResponseWriter and bufio.Writer do.
func (s *Stream) Copy(w io.Writer, r io.Reader) error { return copyLines(w, r, s) }

// write writes b, if any, and flushes.
func write(w io.Writer, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	switch f := w.(type) {
	case interface{ Flush() error }:
		return f.Flush()
	case interface{ Flush() }:
		f.Flush()
	}
	return nil
}
