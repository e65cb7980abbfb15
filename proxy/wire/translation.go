package wire

import (
	"errors"
	"net/http"

	"github.com/ctxproxy/ctxproxy/proxy/translate"
)

// Translation carries Ollama's answer to a translated request back
// into the client's dialect.
type Translation interface {
	Streamed() bool
	Dropped() []translate.Drop
	// ErrorJSON is a translation error in the dialect's error shape.
	ErrorJSON(e *translate.Error) []byte
	// Whole translates a Whole /api/chat answer.
	Whole(body []byte) ([]byte, error)
	// Lines returns a converter for a streamed answer.
	Lines() translate.LineConverter
}

type openaiReply struct{ info translate.Info }

func (r openaiReply) Streamed() bool { return r.info.Stream }

func (r openaiReply) Dropped() []translate.Drop { return r.info.Dropped }

func (r openaiReply) ErrorJSON(e *translate.Error) []byte { return e.JSON() }

func (r openaiReply) Whole(body []byte) ([]byte, error) {
	return translate.Response(body, r.info, translate.ResponseOptions{})
}

func (r openaiReply) Lines() translate.LineConverter {
	return translate.NewStream(r.info, translate.ResponseOptions{})
}

type responsesReply struct{ info translate.ResponsesInfo }

func (r responsesReply) Streamed() bool { return r.info.Stream }

func (r responsesReply) Dropped() []translate.Drop { return r.info.Dropped }

func (r responsesReply) ErrorJSON(e *translate.Error) []byte { return e.JSON() }

func (r responsesReply) Whole(body []byte) ([]byte, error) {
	return translate.ResponsesResponse(body, r.info, translate.ResponseOptions{})
}

func (r responsesReply) Lines() translate.LineConverter {
	return translate.NewResponsesStream(r.info, translate.ResponseOptions{})
}

type messagesReply struct{ info translate.MessagesInfo }

func (r messagesReply) Streamed() bool { return r.info.Stream }

func (r messagesReply) Dropped() []translate.Drop { return r.info.Dropped }

func (r messagesReply) ErrorJSON(e *translate.Error) []byte { return e.AnthropicJSON() }

func (r messagesReply) Whole(body []byte) ([]byte, error) {
	return translate.MessagesResponse(body, r.info, translate.ResponseOptions{})
}

func (r messagesReply) Lines() translate.LineConverter {
	return translate.NewMessagesStream(r.info, translate.ResponseOptions{})
}

// ToOllama translates a request body of dialect d (OpenAI chat,
// Responses or Messages) into an Ollama /api/chat body with opts (the
// num_ctx, the server's version, what the model cannot do).
// inputTokens is ctxproxy's count of the prompt, which a Messages stream
// shows in message_start. The Translation is usable even with an
// error, for its error shape.
func ToOllama(d Dialect, body []byte, opts translate.RequestOptions, inputTokens int) ([]byte, Translation, error) {
	switch d {
	case Responses:
		out, info, err := translate.ResponsesRequest(body, opts)
		return out, responsesReply{info}, err
	case Messages:
		out, info, err := translate.MessagesRequest(body, opts)
		info.InputTokens = inputTokens
		return out, messagesReply{info}, err
	}
	out, info, err := translate.Request(body, opts)
	return out, openaiReply{info}, err
}

// TranslationError is a translation failure as the client's error.
func TranslationError(rt Translation, err error) *Error {
	var te *translate.Error
	if errors.As(err, &te) {
		return &Error{Status: te.Status, Message: te.Message, Code: te.Code, Raw: rt.ErrorJSON(te)}
	}
	return &Error{Status: http.StatusBadRequest, Message: err.Error()}
}

// TranslationFor is the translation into dialect d (Responses or
// Messages) of an Ollama answer about info (the model, whether it
// streams), for an answer ctxproxy writes itself.
func TranslationFor(d Dialect, info translate.Info) Translation {
	if d == Responses {
		return responsesReply{translate.ResponsesInfo{Info: info}}
	}
	return messagesReply{translate.MessagesInfo{Info: info}}
}
