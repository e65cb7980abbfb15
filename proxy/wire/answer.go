package wire

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"

	"github.com/ctxproxy/ctxproxy/proxy/translate"
)

// TranslateAnswer turns Ollama's answer to a translated request back into
// the client's dialect (OpenAI chat, Responses or Messages): errors into
// the dialect's error objects, a JSON body into its reply object, an
// NDJSON stream into its SSE events, line by line so every event is
// flushed as it comes.
func TranslateAnswer(resp *http.Response, rt Translation) error {
	h := resp.Header
	h.Del("Content-Length")
	resp.ContentLength = -1
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		e := translate.BackendError(resp.StatusCode, body)
		out := rt.ErrorJSON(e)
		resp.StatusCode = e.Status
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(out)))
		resp.ContentLength = int64(len(out))
		resp.Body = io.NopCloser(bytes.NewReader(out))
		return nil
	}
	if !rt.Streamed() {
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close() // the tap has read it whole
		if err != nil {
			return err
		}
		out, err := rt.Whole(body)
		if err != nil {
			var te *translate.Error
			if errors.As(err, &te) {
				out = rt.ErrorJSON(te)
				resp.StatusCode = te.Status
			} else {
				return err
			}
		}
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(out)))
		resp.ContentLength = int64(len(out))
		resp.Body = io.NopCloser(bytes.NewReader(out))
		return nil
	}
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	resp.Body = &sseBody{src: resp.Body, st: rt.Lines()}
	return nil
}

// sseBody reads Ollama NDJSON from src and yields the client's SSE events. Each
// Read returns the events of the lines that have arrived, so the proxy
// flushes them before reading further.
type sseBody struct {
	src  io.ReadCloser
	st   translate.LineConverter
	in   []byte // an incomplete line
	out  []byte // converted, not yet read
	buf  [32 << 10]byte
	done bool
}

func (b *sseBody) Read(p []byte) (int, error) {
	for len(b.out) == 0 {
		if b.done {
			return 0, io.EOF
		}
		n, err := b.src.Read(b.buf[:])
		b.in = append(b.in, b.buf[:n]...)
		for {
			i := bytes.IndexByte(b.in, '\n')
			if i < 0 {
				break
			}
			out, aerr := b.st.Append(b.out, b.in[:i])
			b.out = out
			b.in = b.in[i+1:]
			if aerr != nil {
				// A line that is not JSON ends the stream, with the
				// error event: a bare end would read as a whole answer.
				b.out, _ = b.st.Finish(b.out)
				b.done = true
				break
			}
		}
		if err != nil {
			if len(bytes.TrimSpace(b.in)) > 0 && !b.done {
				b.out, _ = b.st.Append(b.out, b.in)
			}
			// Finish adds nothing after a clean end; after a cut-off it
			// adds an error event and no [DONE], so the client sees the
			// answer is incomplete.
			b.out, _ = b.st.Finish(b.out)
			b.done = true
			if err != io.EOF && len(b.out) == 0 {
				return 0, err
			}
		}
	}
	n := copy(p, b.out)
	b.out = b.out[n:]
	return n, nil
}

func (b *sseBody) Close() error { return b.src.Close() }
