package config

import (
	"strings"
	"testing"
	"time"
)

func TestServers(t *testing.T) {
	c := Default()
	if s := c.Servers(); len(s) != 1 || s[0].URL != c.Backend.URL || s[0].Memory != MemoryLocal || s[0].Name != "127.0.0.1:11434" {
		t.Fatalf("the short form: %+v", s)
	}
	env := map[string]string{"CTXPROXY_BACKENDS": "gpu1=http://10.0.0.1:11434, http://10.0.0.2:11434/v1"}
	c, _, problems := Load(LoadOptions{Getenv: func(k string) string { return env[k] }})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	s := c.Servers()
	if len(s) != 2 || s[0].Name != "gpu1" || s[0].URL != "http://10.0.0.1:11434" || s[1].Name != "10.0.0.2:11434" ||
		s[1].URL != "http://10.0.0.2:11434" || s[1].Weight != 1 || s[1].DialTimeout != 10*time.Second || s[1].Kind != "auto" {
		t.Fatalf("from the environment: %+v", s)
	}
}

func TestServersProblems(t *testing.T) {
	c := Default()
	c.Backend.Routing = "random"
	c.Backends = []Server{{URL: "http://a:1"}, {URL: "http://a:1"}, {URL: "ftp://b"}, {URL: "http://c:1", Memory: "gpu", Weight: -1}}
	got := strings.Join(c.validate(), "\n")
	for _, want := range []string{"backend.routing", "backends[1].name", "backends[2].url", "backends[3].memory", "backends[3].weight"} {
		if !strings.Contains(got, want) {
			t.Errorf("no problem with %s in:\n%s", want, got)
		}
	}
}

func TestServersMemoryProblems(t *testing.T) {
	for _, tc := range []struct {
		s    Server
		want string // "" for none
	}{
		{Server{URL: "http://a:1", Memory: "http://gpu2:8080", MemoryToken: "t"}, ""},
		{Server{URL: "http://a:1", Memory: "https://gpu2:8080/"}, ""},
		{Server{URL: "http://a:1"}, ""},
		{Server{URL: "http://a:1", Memory: "none"}, ""},
		{Server{URL: "http://a:1", Memory: "local", MemoryToken: "t"}, "backends[0].memory_token"},
		{Server{URL: "http://a:1", Memory: "http://me:secret@gpu2:8080"}, "memory_token"},
		{Server{URL: "http://a:1", Memory: "gpu2:8080"}, "backends[0].memory"},
	} {
		c := Default()
		c.Backends = []Server{tc.s}
		got := strings.Join(c.validate(), "\n")
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: problems %q, want one with %q", tc.s, got, tc.want)
		}
		if strings.Contains(got, "secret") {
			t.Errorf("a problem shows the password: %s", got)
		}
	}
}
