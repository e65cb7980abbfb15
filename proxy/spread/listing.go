package spread

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/fleet"
	"github.com/ctxproxy/ctxproxy/proxy/translate"
)

// maxListing bounds one server's listing read.
const maxListing = 64 << 20

// reply is one server's answer to a request asked of several.
type reply struct {
	s      *fleet.Node
	status int
	header http.Header
	body   []byte
	err    error
}

// ask sends r (a GET) to every server of servers at once, each within
// the listing timeout, and returns their replies in servers' order.
func (h *Handler) ask(r *http.Request, servers []*fleet.Node) []reply {
	replies := make([]reply, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(r.Context(), h.cfg.Timeout)
			defer cancel()
			rp := reply{s: s}
			resp, err := s.Transport.RoundTrip(h.outbound(ctx, r, s, nil))
			if err == nil {
				s.Answered()
				rp.status, rp.header = resp.StatusCode, resp.Header
				rp.body, err = io.ReadAll(io.LimitReader(resp.Body, maxListing))
				resp.Body.Close()
			} else if isDialError(err) {
				s.Failed(err.Error())
			}
			rp.err = err
			replies[i] = rp
		})
	}
	wg.Wait()
	return replies
}

// entry is one model of a listing: the server's JSON as it wrote it,
// and what the merge reads of it.
type entry struct {
	raw  json.RawMessage
	name string
	at   int64 // the time it is ordered by, in Unix seconds
}

// listShapes are the listings merged, by path: the member that holds
// the list, the entry's name member (and the one used when it is
// empty), and the member ordered by, latest first, as Ollama orders
// them.
var listShapes = map[string]struct{ list, name, alt, at string }{
	"/api/tags":  {"models", "name", "model", "modified_at"},
	"/api/ps":    {"models", "name", "model", "expires_at"},
	"/v1/models": {"data", "id", "", "created"},
}

// listing answers a listing with the merge of every server's that is up.
func (h *Handler) listing(w http.ResponseWriter, r *http.Request) {
	shape := listShapes[r.URL.Path]
	var top map[string]json.RawMessage
	var merged []entry
	seen := map[string]bool{}
	answered := 0
	for _, rp := range h.ask(r, h.up()) {
		obj, list, err := decodeListing(rp, shape.list)
		if err != nil {
			h.cfg.Log.Warn("a backend's listing is left out", "backend", rp.s.Name, "path", r.URL.Path, "err", err)
			continue
		}
		answered++
		if top == nil {
			top = obj
		}
		for _, raw := range list {
			e := entryOf(raw, shape.name, shape.alt, shape.at)
			if e.name != "" && seen[e.name] {
				continue
			}
			seen[e.name] = true
			merged = append(merged, e)
		}
	}
	if answered == 0 {
		h.fail(w, r, http.StatusBadGateway, "ctxproxy could not list the models of any backend")
		return
	}
	slices.SortStableFunc(merged, func(a, b entry) int { return cmp.Compare(b.at, a.at) })
	list := make([]json.RawMessage, len(merged))
	for i, e := range merged {
		list[i] = e.raw
	}
	top[shape.list], _ = json.Marshal(list)
	body, err := json.Marshal(top)
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, "encoding the listing: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// decodeListing reads a server's listing: its members, and the list.
func decodeListing(rp reply, member string) (map[string]json.RawMessage, []json.RawMessage, error) {
	if rp.err != nil {
		return nil, nil, rp.err
	}
	if rp.status != http.StatusOK {
		return nil, nil, fmt.Errorf("status %d: %s", rp.status, translate.ErrorText(rp.body))
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(rp.body, &obj); err != nil {
		return nil, nil, err
	}
	var list []json.RawMessage
	if raw, ok := obj[member]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, nil, err
		}
	}
	return obj, list, nil
}

// entryOf reads raw's name (member name, else alt) and its time (member
// at: an RFC 3339 time or Unix seconds).
func entryOf(raw json.RawMessage, name, alt, at string) entry {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(raw, &m)
	e := entry{raw: raw}
	for _, k := range []string{name, alt} {
		if k != "" && e.name == "" {
			_ = json.Unmarshal(m[k], &e.name)
		}
	}
	var t time.Time
	if json.Unmarshal(m[at], &t) == nil {
		e.at = t.Unix()
	} else {
		_ = json.Unmarshal(m[at], &e.at)
	}
	return e
}

// retrieve answers GET /v1/models/{model} with the first server's
// answer (in the configuration's order) that knows the model, else the
// first server's answer.
func (h *Handler) retrieve(w http.ResponseWriter, r *http.Request) {
	var chosen *reply
	replies := h.ask(r, h.up())
	for i, rp := range replies {
		if rp.err != nil {
			h.cfg.Log.Warn("a backend did not answer", "backend", rp.s.Name, "path", r.URL.Path, "err", rp.err)
			continue
		}
		if chosen == nil || rp.status == http.StatusOK && chosen.status != http.StatusOK {
			chosen = &replies[i]
		}
	}
	if chosen == nil {
		h.fail(w, r, http.StatusBadGateway, "ctxproxy could not reach any backend")
		return
	}
	hd := w.Header()
	for k, v := range chosen.header {
		hd[k] = v
	}
	h.cfg.Hop(hd)
	hd.Del("Content-Encoding")
	hd.Set("Content-Length", strconv.Itoa(len(chosen.body)))
	hd.Set(BackendHeader, chosen.s.Name)
	w.WriteHeader(chosen.status)
	_, _ = w.Write(chosen.body)
}
