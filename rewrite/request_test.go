package rewrite

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// A Request carries the client's credential for the summarizer: printed
// or encoded, directly or inside an Input, it shows that there is one and
// never what it is.
func TestRequestHidesTheCredential(t *testing.T) {
	req := Request{Session: "s", Model: "m", Auth: "Bearer sk-secret", Mode: "summarize"}
	in := Input{Request: req, Target: 10}
	js, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{fmt.Sprint(req), fmt.Sprintf("%+v", req), fmt.Sprintf("%v", in), fmt.Sprintf("%+v", in), string(js)} {
		if strings.Contains(out, "sk-secret") {
			t.Errorf("the credential leaks: %s", out)
		}
	}
	if s := req.String(); !strings.Contains(s, "Auth:[redacted]") || !strings.Contains(s, `Mode:"summarize"`) {
		t.Errorf("String() = %s", s)
	}
}
