package edge

import "testing"

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"http://localhost:*", "http://localhost:3000", true},
		{"http://localhost:*", "http://localhost.evil.example:3000", false},
		{"http://localhost", "http://localhost:3000", false},
		{"chrome-extension://*", "chrome-extension://abcdef", true},
		{"https://*.example.com", "https://chat.example.com", true},
		{"https://*.example.com", "http://chat.example.com", false},
		{"*.corp.example", "a.corp.example", true},
		{"ctxproxy", "ctxproxy", true},
	} {
		if got := match(tc.pattern, tc.s); got != tc.want {
			t.Errorf("match(%q, %q) = %v", tc.pattern, tc.s, got)
		}
	}
}

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:11435": true, "127.1.2.3:80": true, "[::1]:11435": true, "localhost:11435": true,
		"LOCALHOST:1": true, "0.0.0.0:11435": false, ":11435": false, "[::]:11435": false,
		"192.168.1.10:11435": false, "example.com:11435": false, "": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
