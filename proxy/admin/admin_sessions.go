package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ctxproxy/ctxproxy/adminapi"
	"github.com/ctxproxy/ctxproxy/proxy/sessions"
	"github.com/ctxproxy/ctxproxy/proxy/wire"
	"github.com/ctxproxy/ctxproxy/snapshots"
)

func (s *adminAPI) listSessions(w http.ResponseWriter, r *http.Request) {
	if s.sessions.Store == nil {
		s.fail(w, sessions.ErrNoStore)
		return
	}
	s.sessions.Settle(r.Context(), "")
	list, err := s.sessions.Store.List(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	out := make([]adminapi.SessionInfo, len(list))
	for i, info := range list {
		out[i] = sessions.SessionInfoOf(info)
	}
	wire.WriteJSON(w, http.StatusOK, adminapi.Sessions{Sessions: out})
}

func (s *adminAPI) getSession(w http.ResponseWriter, r *http.Request) {
	s.sessions.Settle(r.Context(), r.PathValue("id"))
	_, out, err := s.sessions.Get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, out)
}

// putSession creates a session or merges metadata (a null value removes
// the key) and the model into it.
func (s *adminAPI) putSession(w http.ResponseWriter, r *http.Request) {
	var body adminapi.SessionUpdate
	if err := readJSON(r, maxAdminBody, &body); err != nil {
		s.fail(w, err)
		return
	}
	id := r.PathValue("id")
	s.sessions.Settle(r.Context(), id)
	err := s.sessions.Store.Update(r.Context(), id, func(sess *snapshots.Session) error {
		if len(body.Metadata) > 0 && sess.Metadata == nil {
			sess.Metadata = make(map[string]any, len(body.Metadata))
		}
		for k, v := range body.Metadata {
			if v == nil {
				delete(sess.Metadata, k)
			} else {
				sess.Metadata[k] = v
			}
		}
		if body.Model != nil && *body.Model != "" {
			sess.Model = *body.Model
		}
		return nil
	})
	if err != nil {
		s.fail(w, err)
		return
	}
	_, out, err := s.sessions.Get(r.Context(), id)
	if err != nil {
		s.fail(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, out)
}

// deleteSession clears a session (as /clear does), or with ?purge=1
// removes it and its snapshots.
func (s *adminAPI) deleteSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.sessions.Settle(r.Context(), id)
	if purge := r.URL.Query().Get("purge"); purge == "1" || purge == "true" {
		if err := s.sessions.Store.Delete(r.Context(), id); err != nil {
			s.fail(w, sessions.NotFound(err, "session %q not found", id))
			return
		}
		s.sessions.Cleared.Take(id)
		wire.WriteJSON(w, http.StatusOK, adminapi.Purged{Purged: true})
		return
	}
	undo, err := s.sessions.Clear(r.Context(), id, false, snapshots.ReasonClear)
	if err != nil {
		s.fail(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, adminapi.Cleared{Cleared: true, Undo: sessions.SnapshotOf(undo)})
}

func (s *adminAPI) getMessages(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.sessions.Settle(r.Context(), id)
	sess, err := s.sessions.Store.Get(r.Context(), id)
	if err != nil {
		s.fail(w, sessions.NotFound(err, "session %q not found", id))
		return
	}
	wire.WriteJSON(w, http.StatusOK, adminapi.Messages{Messages: sessions.MessagesOf(sess.Messages)})
}

// appendMessages is `context add`: messages with an importance (and
// metadata) pinned to a session outside any chat. The session is created
// when it does not exist.
func (s *adminAPI) appendMessages(w http.ResponseWriter, r *http.Request) {
	var body adminapi.NewMessages
	if err := readJSON(r, maxAdminBody, &body); err != nil {
		s.fail(w, err)
		return
	}
	if len(body.Messages) == 0 {
		s.fail(w, sessions.Errorf(http.StatusBadRequest, `want {"messages": [{"role", "content", "importance", "metadata"}, …]}`))
		return
	}
	now := time.Now().UTC()
	msgs := make([]snapshots.Message, len(body.Messages))
	for i, m := range body.Messages {
		roleErr := snapshots.CheckRole(m.Role)
		switch {
		case m.Role == "":
			s.fail(w, sessions.Errorf(http.StatusBadRequest, "messages[%d]: \"role\" is missing", i))
			return
		case roleErr != nil:
			s.fail(w, sessions.Errorf(http.StatusBadRequest, "messages[%d]: %v", i, roleErr))
			return
		case m.Content == nil:
			s.fail(w, sessions.Errorf(http.StatusBadRequest, "messages[%d]: \"content\" is missing", i))
			return
		case m.Importance != nil && !(*m.Importance >= 0 && *m.Importance <= 1):
			s.fail(w, sessions.Errorf(http.StatusBadRequest, "messages[%d]: \"importance\" %v is not in [0, 1]", i, *m.Importance))
			return
		}
		msgs[i] = snapshots.Message{Role: m.Role, Content: *m.Content, Timestamp: now, Importance: m.Importance,
			Metadata: m.Metadata, Preserve: m.Preserve}
	}
	id := r.PathValue("id")
	s.sessions.Settle(r.Context(), id)
	total := 0
	err := s.sessions.Store.Update(r.Context(), id, func(sess *snapshots.Session) error {
		sess.Messages = append(slices.Clip(sess.Messages), msgs...)
		total = len(sess.Messages)
		s.sessions.Measure(sess)
		return nil
	})
	if err != nil {
		s.fail(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, adminapi.Appended{Appended: len(msgs), Messages: total})
}

func (s *adminAPI) exportSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.sessions.Settle(r.Context(), id)
	sess, err := s.sessions.Store.Get(r.Context(), id)
	if err != nil {
		s.fail(w, sessions.NotFound(err, "session %q not found", id))
		return
	}
	data, err := snapshots.EncodeExport(sess)
	if err != nil {
		s.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	_, _ = w.Write(data)
}

// importSession loads an export, a bare array of messages or a chat
// request body into a session; a malformed body changes nothing.
func (s *adminAPI) importSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	data, err := io.ReadAll(io.LimitReader(r.Body, s.maxBody+1))
	if err != nil {
		s.fail(w, sessions.Errorf(http.StatusBadRequest, "reading the request body failed"))
		return
	}
	if int64(len(data)) > s.maxBody {
		s.fail(w, sessions.Errorf(http.StatusRequestEntityTooLarge, "import is larger than the %d bytes ctxproxy accepts (max_body)", s.maxBody))
		return
	}
	s.sessions.Settle(r.Context(), id)
	n, undo, err := snapshots.Import(r.Context(), s.sessions.FullStore(), id, data)
	if err != nil {
		s.fail(w, err)
		return
	}
	s.sessions.Remeasure(r.Context(), id)
	wire.WriteJSON(w, http.StatusOK, adminapi.Imported{Imported: n, Undo: sessions.SnapshotOf(undo)})
}

func (s *adminAPI) listSnapshots(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.sessions.Settle(r.Context(), id)
	list, err := s.sessions.Store.ListSnapshots(r.Context(), id)
	if err != nil {
		s.fail(w, err)
		return
	}
	if len(list) == 0 {
		// No snapshots is an answer for a session that exists.
		if _, err := s.sessions.Store.Get(r.Context(), id); err != nil {
			s.fail(w, sessions.NotFound(err, "session %q not found", id))
			return
		}
	}
	out := make([]adminapi.SnapshotInfo, len(list))
	for i, info := range list {
		out[i] = *sessions.SnapshotOf(info)
	}
	wire.WriteJSON(w, http.StatusOK, adminapi.Snapshots{Snapshots: out})
}

// reasons are the snapshot reasons a client may give.
var reasons = []string{snapshots.ReasonManual, snapshots.ReasonAuto, snapshots.ReasonOverflow,
	snapshots.ReasonEmergency, snapshots.ReasonRestore, snapshots.ReasonImport, snapshots.ReasonClear, snapshots.ReasonPrune}

func (s *adminAPI) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Reason string `json:"reason"`
	}
	if err := readJSON(r, maxAdminBody, &body); err != nil {
		s.fail(w, err)
		return
	}
	if body.Reason == "" {
		body.Reason = snapshots.ReasonManual
	}
	if !slices.Contains(reasons, body.Reason) {
		s.fail(w, sessions.Errorf(http.StatusBadRequest, "reason %q is not one of %s", body.Reason, strings.Join(reasons, ", ")))
		return
	}
	s.sessions.Settle(r.Context(), r.PathValue("id"))
	info, err := s.sessions.Snapshot(r.Context(), r.PathValue("id"), body.Reason)
	if err != nil {
		s.fail(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusCreated, sessions.SnapshotOf(info))
}

func (s *adminAPI) restoreSnapshot(w http.ResponseWriter, r *http.Request) {
	id, snap := r.PathValue("id"), r.PathValue("snap")
	s.sessions.Settle(r.Context(), id)
	n, undo, err := s.sessions.Restore(r.Context(), id, snap)
	if err != nil {
		s.fail(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, adminapi.Restored{Restored: snap, Messages: n, Undo: sessions.SnapshotOf(undo)})
}

func (s *adminAPI) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	id, snap := r.PathValue("id"), r.PathValue("snap")
	s.sessions.Settle(r.Context(), id)
	if err := s.sessions.Store.DeleteSnapshot(r.Context(), id, snap); err != nil {
		s.fail(w, sessions.NotFound(err, "snapshot %q of session %q not found", snap, id))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// compressSession compresses a session now, or with ?dry_run=1 answers
// what a compress would do and changes nothing.
func (s *adminAPI) compressSession(w http.ResponseWriter, r *http.Request) {
	compact := s.sessions.Compact
	switch v := r.URL.Query().Get("dry_run"); v {
	case "1", "true":
		compact = s.sessions.CompactDryRun
	case "", "0", "false":
	default:
		// A value not understood must not compress a session that the
		// client only meant to look at.
		s.fail(w, sessions.Errorf(http.StatusBadRequest, "dry_run: %q is not 1, true, 0 or false", v))
		return
	}
	var body adminapi.CompressRequest
	if r.ContentLength != 0 {
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&body); err != nil && !errors.Is(err, io.EOF) {
			s.fail(w, sessions.Errorf(http.StatusBadRequest, "the body is not a JSON object {\"instructions\": \"...\"}: %v", err))
			return
		}
	}
	s.sessions.Settle(r.Context(), r.PathValue("id"))
	res, err := compact(r.Context(), r.PathValue("id"), body.Instructions)
	if err != nil {
		s.fail(w, err)
		return
	}
	wire.WriteJSON(w, http.StatusOK, res)
}
