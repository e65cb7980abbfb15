package wire

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/ctxproxy/ctxproxy/internal/jsonscan"
)

// RawRequest is the part of a raw-prompt request (Ollama's /api/generate,
// OpenAI's /v1/completions) ctxproxy reads to count it.
type RawRequest struct {
	Model    string            `json:"model"`
	Prompt   json.RawMessage   `json:"prompt"`
	System   string            `json:"system"`
	Template string            `json:"template"`
	Suffix   string            `json:"suffix"`
	Raw      bool              `json:"raw"`
	Stream   *bool             `json:"stream"`
	Images   []json.RawMessage `json:"images"`
	Context  []int             `json:"context"`
	Think    json.RawMessage   `json:"think"`
	Options  struct {
		NumCtx int `json:"num_ctx"`
	} `json:"options"`
}

// errBadMember stops the walk of a member that does not fit its field.
var errBadMember = errors.New("member does not fit its field")

// DecodeRaw reads a raw-prompt request the way encoding/json would into
// RawRequest (keys matched without regard to case, the last of a repeated
// key kept, null leaving a field at zero) and its prompt as a string, in
// one validating pass and a walk of the top-level members: a 100 KB prompt
// cost three encoding/json passes and two copies. ok is false for
// anything encoding/json would refuse, nesting deeper than maxDepth, or a
// prompt that is not a string; such a request is forwarded as sent.
func DecodeRaw(body []byte, maxDepth int) (req RawRequest, prompt string, ok bool) {
	v, err := jsonscan.ValidDepth(body, maxDepth)
	if err != nil || jsonscan.KindOf(v) != jsonscan.KindObject {
		return RawRequest{}, "", false
	}
	bad := false
	_ = jsonscan.Members(v, func(key, val []byte) error {
		if !readRawMember(&req, jsonscan.KeyName(key), val) {
			bad = true
			return errBadMember
		}
		return nil
	})
	if bad || req.Prompt == nil {
		return RawRequest{}, "", false
	}
	if jsonscan.KindOf(req.Prompt) == jsonscan.KindNull {
		return req, "", true
	}
	if jsonscan.KindOf(req.Prompt) != jsonscan.KindString {
		return RawRequest{}, "", false
	}
	if prompt, err = decodeText(req.Prompt); err != nil {
		return RawRequest{}, "", false
	}
	return req, prompt, true
}

// decodeText decodes a string token as encoding/json does: shared with
// the body when it has no escapes and is valid UTF-8 (the common case),
// else decoded (escapes read, invalid bytes replaced by U+FFFD).
func decodeText(tok []byte) (string, error) {
	s, err := DecodeString(tok)
	if err == nil && !utf8.ValidString(s) {
		err = json.Unmarshal(tok, &s)
	}
	return s, err
}

// readRawMember sets the field of req that key names, as encoding/json
// would; false when the value does not fit the field.
func readRawMember(req *RawRequest, key string, val []byte) bool {
	null := jsonscan.KindOf(val) == jsonscan.KindNull
	str := func(dst *string) bool {
		switch jsonscan.KindOf(val) {
		case jsonscan.KindNull:
			return true
		case jsonscan.KindString:
			s, err := decodeText(val)
			*dst = s
			return err == nil
		}
		return false
	}
	switch {
	case strings.EqualFold(key, "model"):
		return str(&req.Model)
	case strings.EqualFold(key, "prompt"):
		req.Prompt = json.RawMessage(val)
	case strings.EqualFold(key, "system"):
		return str(&req.System)
	case strings.EqualFold(key, "template"):
		return str(&req.Template)
	case strings.EqualFold(key, "suffix"):
		return str(&req.Suffix)
	case strings.EqualFold(key, "raw"):
		switch string(val) {
		case "true":
			req.Raw = true
		case "false":
			req.Raw = false
		case "null":
		default:
			return false
		}
	case strings.EqualFold(key, "stream"):
		switch string(val) {
		case "true", "false":
			b := string(val) == "true"
			req.Stream = &b
		case "null":
			req.Stream = nil
		default:
			return false
		}
	case strings.EqualFold(key, "images"):
		if null {
			req.Images = nil
			return true
		}
		if jsonscan.KindOf(val) != jsonscan.KindArray {
			return false
		}
		imgs := []json.RawMessage{}
		_ = jsonscan.Elements(val, func(_ int, el []byte) error {
			imgs = append(imgs, json.RawMessage(el))
			return nil
		})
		req.Images = imgs
	case strings.EqualFold(key, "context"):
		if null {
			req.Context = nil
			return true
		}
		if jsonscan.KindOf(val) != jsonscan.KindArray {
			return false
		}
		ctx := []int{}
		fits := true
		_ = jsonscan.Elements(val, func(_ int, el []byte) error {
			n, ok := jsonInt(el)
			fits = fits && ok
			ctx = append(ctx, n)
			return nil
		})
		req.Context = ctx
		return fits
	case strings.EqualFold(key, "think"):
		req.Think = json.RawMessage(val)
	case strings.EqualFold(key, "options"):
		// A map in Ollama's request: null empties it, an object's keys
		// are added to it, and its keys are matched exactly.
		if null {
			req.Options.NumCtx = 0
			return true
		}
		if jsonscan.KindOf(val) != jsonscan.KindObject {
			return false
		}
		fits := true
		_ = jsonscan.Members(val, func(k, v []byte) error {
			if jsonscan.KeyName(k) == "num_ctx" {
				if jsonscan.KindOf(v) == jsonscan.KindNull {
					req.Options.NumCtx = 0
					return nil
				}
				n, ok := jsonInt(v)
				req.Options.NumCtx, fits = n, fits && ok
			}
			return nil
		})
		return fits
	}
	return true
}

// jsonInt reads a JSON number that encoding/json would put in an int.
func jsonInt(v []byte) (int, bool) {
	n, err := strconv.Atoi(string(v))
	return n, err == nil
}
