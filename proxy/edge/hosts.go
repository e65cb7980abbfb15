package edge

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path"
	"strings"
)

// DNS rebinding protection, as Ollama's own (allowedHostsMiddleware and
// its CORS origins in server/routes.go, v0.17.4). A page on evil.example
// can make a browser send requests to 127.0.0.1 by rebinding its name:
// they arrive with "Host: evil.example". Bound to loopback, ctxproxy
// answers only requests addressed to a local name or address; and, since
// forwarding rewrites Host to the backend's, it must check for the
// backend too, or it would switch off Ollama's own protection.
//
// Browsers also say where a request comes from (Origin): a request from a
// page that is not local, not the same origin and not allowed by config
// is refused, as Ollama refuses origins outside OLLAMA_ORIGINS.

// HostPolicy configures the Host and Origin checks.
type HostPolicy struct {
	// Loopback is whether ctxproxy listens on a loopback address only;
	// then the Host check applies always. Beyond loopback (a container's
	// 0.0.0.0, replicas behind a balancer) it applies only when
	// AllowedHosts is set.
	Loopback bool
	// AllowedHosts are more host names that pass ("ctxproxy",
	// "*.example.com").
	AllowedHosts []string
	// AllowedOrigins are more browser origins that pass, with * as a
	// wildcard ("https://chat.example.com", "chrome-extension://*"), as
	// OLLAMA_ORIGINS takes them.
	AllowedOrigins []string
}

// defaultOrigins are the origins Ollama allows without OLLAMA_ORIGINS.
var defaultOrigins = []string{
	"http://localhost", "https://localhost", "http://localhost:*", "https://localhost:*",
	"http://127.0.0.1", "https://127.0.0.1", "http://127.0.0.1:*", "https://127.0.0.1:*",
	"http://0.0.0.0", "https://0.0.0.0", "http://0.0.0.0:*", "https://0.0.0.0:*",
	"http://[::1]", "https://[::1]", "http://[::1]:*", "https://[::1]:*",
	"app://*", "file://*", "tauri://*", "vscode-webview://*", "vscode-file://*",
}

// Check returns why r may not be served, "" when it may.
func (p HostPolicy) Check(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.Host)
	if err != nil {
		host = r.Host
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if p.Loopback || len(p.AllowedHosts) > 0 {
		if !p.hostAllowed(host) {
			return fmt.Sprintf("Host %q is not a local name or address, nor in allowed_hosts: refused "+
				"(a page that rebinds its DNS name to this machine must not reach it)", r.Host)
		}
	}
	if origin := r.Header.Get("Origin"); origin != "" && !p.originAllowed(origin, r.Host) {
		return fmt.Sprintf("Origin %q is not allowed: refused (add it to allowed_origins to let that page in)", origin)
	}
	return ""
}

func (p HostPolicy) hostAllowed(host string) bool {
	if addr, err := netip.ParseAddr(host); err == nil {
		addr = addr.Unmap()
		if addr.IsLoopback() || addr.IsPrivate() || addr.IsUnspecified() || isLocalIP(addr) {
			return true
		}
	}
	if host == "" || host == "localhost" {
		return true
	}
	if name, err := os.Hostname(); err == nil && host == strings.ToLower(name) {
		return true
	}
	for _, tld := range []string{".localhost", ".local", ".internal"} {
		if strings.HasSuffix(host, tld) {
			return true
		}
	}
	for _, h := range p.AllowedHosts {
		if match(strings.ToLower(h), host) {
			return true
		}
	}
	return false
}

// originAllowed reports whether a browser page at origin may call
// ctxproxy at host: a local origin, the same origin, or one configured.
func (p HostPolicy) originAllowed(origin, host string) bool {
	if u, err := url.Parse(origin); err == nil && u.Host != "" && strings.EqualFold(u.Host, host) {
		return true // the status page calling its own server
	}
	o := strings.ToLower(origin)
	for _, pattern := range defaultOrigins {
		if match(pattern, o) {
			return true
		}
	}
	for _, pattern := range p.AllowedOrigins {
		if pattern == "*" || match(strings.ToLower(pattern), o) {
			return true
		}
	}
	return false
}

// match reports whether s matches pattern, where * stands for any run of
// characters.
func match(pattern, s string) bool {
	if !strings.Contains(pattern, "*") {
		return pattern == s
	}
	// path.Match's * does not cross "/"; origins and hosts hold no "/"
	// after the scheme, so match the scheme apart.
	ps, prest, pok := strings.Cut(pattern, "://")
	ss, srest, sok := strings.Cut(s, "://")
	if pok != sok {
		return false
	}
	if pok {
		if ok, _ := path.Match(ps, ss); !ok {
			return false
		}
		pattern, s = prest, srest
	}
	ok, _ := path.Match(pattern, s)
	return ok
}

// isLocalIP reports whether addr is one of this machine's addresses.
func isLocalIP(addr netip.Addr) bool {
	ifaces, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range ifaces {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == addr {
			return true
		}
	}
	return false
}

// Loopback reports whether a listen address (host:port) accepts
// connections from this machine only: 127.0.0.0/8, ::1 or localhost.
// Anything else, an empty host (every interface) included, is not, and
// without admin.token the admin API stays off there.
func Loopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
