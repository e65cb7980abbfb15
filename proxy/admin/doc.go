// Package admin serves ctxproxy's own routes under /ctxproxy/: the health
// checks a load balancer asks (healthz, readyz), the admin API over the
// sessions and the live status (docs/admin-api.md), and the status page
// that reads it. Status gathers what GET /ctxproxy/status reports,
// including the models the chat routes used.
package admin
