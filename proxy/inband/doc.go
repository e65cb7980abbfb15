// Package inband answers the context commands a user types as a chat
// message (/context, /context restore ID, /clear, /compact, …) when
// commands.inband is on: Command recognises one as the newest message of a
// request, Commands.Run answers it over the session and status services,
// WriteAnswer writes the answer as an assistant message in the request's
// dialect. For clients that resend their whole history it also takes
// ctxproxy's own exchanges out of what is forwarded (History) and applies
// a pending restore (Restorer).
package inband
