package admin

import (
	"regexp"
	"testing"
)

// The page loads nothing from elsewhere and never turns API data into
// HTML: session ids are client data.
func TestStatusPageSelfContained(t *testing.T) {
	external := regexp.MustCompile(`(?i)(src|href)\s*=\s*["']?(https?:)?//|@import|url\(\s*["']?(https?:)?//`)
	unsafe := regexp.MustCompile(`innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function`)
	for name, a := range uiAssets {
		if m := external.Find(a.data); m != nil {
			t.Errorf("%s refers to an external resource: %q", name, m)
		}
		if m := unsafe.Find(a.data); m != nil {
			t.Errorf("%s uses %q", name, m)
		}
	}
	for _, want := range []string{"ui/index.html", "ui/app.css", "ui/app.js"} {
		if _, ok := uiAssets[want]; !ok {
			t.Errorf("%s is not embedded", want)
		}
	}
}
