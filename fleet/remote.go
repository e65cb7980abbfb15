package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/gpu"
	"github.com/ctxproxy/ctxproxy/modelinfo"
)

// Remote reads a server's memory from the ctxproxy that runs on its
// machine (backends[].memory: its URL): the GPU section of that
// ctxproxy's GET /ctxproxy/status, which is its monitor's last sample,
// and the server's loaded models, asked of the server itself as the
// local monitor asks them.
//
// A reading is fetched at most once per Every; callers in between get
// the last one. One fetch is in flight at a time, and callers that need
// it share it. A reading older than MaxAge (the other ctxproxy stopped
// answering) is not used: Reading returns false and num_ctx is left to
// the server until it answers again.
type Remote struct {
	// URL is the other ctxproxy's root (no credentials in it).
	URL *url.URL
	// Token is its admin.token, sent as a bearer token; "" sends none.
	Token string
	// Client makes the requests; nil is a client with Timeout.
	Client *http.Client
	// Loaded lists the server's loaded models (its /api/ps); nil leaves
	// them unknown.
	Loaded func(ctx context.Context) ([]modelinfo.Loaded, error)
	// Every, MaxAge and Timeout default to RemoteEvery, RemoteMaxAge
	// and RemoteTimeout.
	Every, MaxAge, Timeout time.Duration
	// Now stands in for time.Now in tests.
	Now func() time.Time

	mu       sync.Mutex
	last     gpu.Reading // Seq 0 until the first answer
	at       time.Time   // when last was fetched
	err      error       // the last fetch's failure, nil when it answered
	seq      uint64
	fetching chan struct{} // closed when the fetch in flight ends; nil when none
}

// Defaults of a Remote.
const (
	RemoteEvery   = 2 * time.Second
	RemoteMaxAge  = 30 * time.Second
	RemoteTimeout = 3 * time.Second
)

// maxStatus bounds the status answer read.
const maxStatus = 16 << 20

// Where is "ctxproxy at" the URL, credentials hidden.
func (r *Remote) Where() string { return "ctxproxy at " + r.URL.Redacted() }

func (r *Remote) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reading returns the last reading while it is younger than Every; an
// older one that is still usable (younger than MaxAge) at once, while
// a fetch refreshes it; and otherwise waits for the fetch in flight, as
// long as ctx allows.
func (r *Remote) Reading(ctx context.Context) (gpu.Reading, bool) {
	r.mu.Lock()
	age := r.now().Sub(r.at)
	usable := r.last.Seq != 0 && age < cmp.Or(r.MaxAge, RemoteMaxAge)
	if usable && age < cmp.Or(r.Every, RemoteEvery) {
		defer r.mu.Unlock()
		return r.last, true
	}
	done := r.startFetch()
	last := r.last
	r.mu.Unlock()
	if usable {
		return last, true
	}
	select {
	case <-done:
	case <-ctx.Done():
		return gpu.Reading{}, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last.Seq == 0 || r.now().Sub(r.at) >= cmp.Or(r.MaxAge, RemoteMaxAge) {
		return gpu.Reading{}, false
	}
	return r.last, true
}

// Last returns the last reading without waiting for one; false when
// there is none younger than MaxAge. When it is older than Every it
// starts a fetch for the next caller, so that the status page, which
// calls it every few seconds, keeps it fresh while no request needs it.
func (r *Remote) Last() (gpu.Reading, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	age := r.now().Sub(r.at)
	if r.last.Seq == 0 || age >= cmp.Or(r.Every, RemoteEvery) {
		r.startFetch()
	}
	if r.last.Seq == 0 || age >= cmp.Or(r.MaxAge, RemoteMaxAge) {
		return gpu.Reading{}, false
	}
	return r.last, true
}

// startFetch starts a fetch unless one is in flight, and returns the
// channel closed when the one in flight ends; the caller holds r.mu.
func (r *Remote) startFetch() chan struct{} {
	if r.fetching == nil {
		r.fetching = make(chan struct{})
		go r.fetch(r.fetching)
	}
	return r.fetching
}

// Err is the last fetch's failure; nil when it answered.
func (r *Remote) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// fetch reads the other ctxproxy's status and publishes it, then closes
// done. It runs on its own context: a caller that gives up does not end
// the fetch others wait for.
func (r *Remote) fetch(done chan struct{}) {
	ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(r.Timeout, RemoteTimeout))
	defer cancel()
	st, err := r.status(ctx)
	var models []modelinfo.Loaded
	var lerr error = errNoLoaded
	if err == nil && r.Loaded != nil {
		models, lerr = r.Loaded(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	defer close(done)
	r.fetching = nil
	r.err = err
	if err != nil {
		return
	}
	r.seq++
	r.last = ReadingOf(st.GPU, r.seq, r.now())
	r.last.Models, r.last.ModelsKnown = models, lerr == nil
	r.at = r.last.Time
}

var errNoLoaded = errors.New("fleet: no source of loaded models")

// status is GET /ctxproxy/status of the other ctxproxy.
func (r *Remote) status(ctx context.Context) (adminapi.Status, error) {
	u := *r.URL
	u.Path = strings.TrimSuffix(u.Path, "/") + "/ctxproxy/status"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return adminapi.Status{}, err
	}
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	client := r.Client
	if client == nil {
		client = &http.Client{Timeout: cmp.Or(r.Timeout, RemoteTimeout)}
	}
	resp, err := client.Do(req)
	if err != nil {
		return adminapi.Status{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return adminapi.Status{}, fmt.Errorf("%s answered %s", r.Where(), resp.Status)
	}
	var st adminapi.Status
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxStatus)).Decode(&st); err != nil {
		return adminapi.Status{}, fmt.Errorf("%s: not a status: %w", r.Where(), err)
	}
	return st, nil
}

// ReadingOf turns the GPU section of a ctxproxy's status into a
// reading numbered seq, taken at t: its devices, probe, guard level and
// error. The loaded models are not in it.
func ReadingOf(g adminapi.GPUStatus, seq uint64, t time.Time) gpu.Reading {
	rd := gpu.Reading{Seq: seq, Time: t, Probe: g.Probe, Devices: g.Devices, Level: levelOf(g.Level)}
	if g.Error != "" {
		rd.Err = errors.New(g.Error)
	}
	return rd
}

// levelOf is a guard level as a status names it ("ok" is normal); an
// unknown name is normal.
func levelOf(name string) gpu.Level {
	for l := gpu.LevelCompress; l <= gpu.LevelEmergency; l++ {
		if l.String() == name {
			return l
		}
	}
	return gpu.LevelNormal
}

// Last returns the reading m last took, without taking one (for the
// status page and metrics, which must not probe); false when none is
// known. A nil Memory has none.
func Last(m Memory) (gpu.Reading, bool) {
	switch m := m.(type) {
	case Local:
		if m.Monitor == nil {
			return gpu.Reading{}, false
		}
		rd := m.Monitor.Reading()
		return rd, rd.Seq != 0
	case interface{ Last() (gpu.Reading, bool) }:
		return m.Last()
	}
	return gpu.Reading{}, false
}
