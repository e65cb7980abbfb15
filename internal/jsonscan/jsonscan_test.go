package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValidValue(t *testing.T) {
	cases := []string{
		``, ` `, `0`, `-0`, `01`, `-`, `1.`, `.5`, `1.5e`, `1e+5`, `1E-0`, `-12.5e10`, `+1`,
		`""`, `"`, `"\"`, `"\u12"`, `"\u12G4"`, `"\uABCD"`, `"\x"`, "\"\t\"", "\"\x7f\"", "\"\xff\"",
		`true`, `tru`, `truex`, `null`, `nul`, `false`,
		`[]`, `[`, `[1,]`, `[,1]`, `[1 2]`, `[1,2]`, ` [ 1 , [ ] , { } ] `,
		`{}`, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a":1 "b":2}`, `{1:2}`, `{"a":1}`, `{"a":{"b":[null]}}`,
		`1 2`, `{}x`, `[]]`,
		strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth),
		strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1),
	}
	for _, c := range cases {
		_, err := Valid([]byte(c))
		if got, want := err == nil, json.Valid([]byte(c)); got != want {
			t.Errorf("Valid(%.40q) ok = %v, json.Valid = %v", c, got, want)
		}
	}
}

func TestMembersAndElements(t *testing.T) {
	obj := []byte(`{ "a" : 1 , "b\u0021" : [ 1 , "x" , {} ] , "c":null }`)
	v, err := Valid(obj)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	_ = Members(v, func(key, val []byte) error {
		got = append(got, KeyName(key)+"="+string(val))
		if KeyIs(key, "b!") {
			_ = Elements(val, func(i int, e []byte) error {
				got = append(got, string(e))
				return nil
			})
		}
		return nil
	})
	want := `a=1|b!=[ 1 , "x" , {} ]|1|"x"|{}|c=null`
	if g := strings.Join(got, "|"); g != want {
		t.Errorf("got %s, want %s", g, want)
	}
}

// FuzzValidValue holds the scanner to encoding/json's idea of valid JSON.
func FuzzValidValue(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5e-3,"x\n\u00e9",true,null]}`, `"\ud83d\ude00"`, `[{}]`, `-0.0E+1`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, err := Valid(b)
		if got, want := err == nil, json.Valid(b); got != want {
			t.Fatalf("Valid(%q) ok = %v, json.Valid = %v", b, got, want)
		}
	})
}

// FuzzValidMembers holds ValidMembers to ValidDepth, and the members it
// reports to those Members finds in the document it accepted.
func FuzzValidMembers(f *testing.F) {
	for _, s := range []string{` { "a" : 1 , "b\u0021" : [ 1 , "x" , {} ] , "c":null } `, `{}`, `[{"a":1}]`, `"x"`,
		`{"a":{"b":[null]}}`, `{"a":1,}`, `{"a":1}x`, strings.Repeat(`{"a":`, 8) + `1` + strings.Repeat(`}`, 8)} {
		f.Add([]byte(s), 5)
	}
	f.Fuzz(func(t *testing.T, b []byte, limit int) {
		limit = limit%MaxDepth + 1
		var got []string
		v, err := ValidMembers(b, limit, func(key, val []byte) { got = append(got, string(key)+"="+string(val)) })
		w, werr := ValidDepth(b, limit)
		if (err == nil) != (werr == nil) || string(v) != string(w) || errors.Is(err, ErrDepth) != errors.Is(werr, ErrDepth) {
			t.Fatalf("ValidMembers(%q, %d) = %q, %v; ValidDepth = %q, %v", b, limit, v, err, w, werr)
		}
		if err != nil || len(w) == 0 || w[0] != '{' {
			return
		}
		var want []string
		_ = Members(w, func(key, val []byte) error {
			want = append(want, string(key)+"="+string(val))
			return nil
		})
		if !slices.Equal(got, want) {
			t.Fatalf("ValidMembers(%q) members %q, Members finds %q", b, got, want)
		}
	})
}

// FuzzAppendString checks that any bytes encode to a valid JSON string that
// decodes to the same text (invalid UTF-8 replaced, as encoding/json does).
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "q\"b\\n\n\t\x00\x1f", "café ☃", "\xff\xfe", "\u2028", "<b>&amp;</b>", "\b\f\x7f", "a\u2029b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok := AppendString(nil, s)
		var got string
		if err := json.Unmarshal(tok, &got); err != nil {
			t.Fatalf("AppendString(%q) = %s: %v", s, tok, err)
		}
		if want := strings.ToValidUTF8(s, "\uFFFD"); got != want && utf8.ValidString(s) {
			t.Fatalf("round trip of %q = %q", s, got)
		}
		if back, err := Unquote(tok); err != nil || back != got {
			t.Fatalf("Unquote(%s) = %q, %v; want %q", tok, back, err, got)
		}
		// The same bytes encoding/json writes, with HTML escaping off
		// and on.
		var plain bytes.Buffer
		enc := json.NewEncoder(&plain)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if want := bytes.TrimSuffix(plain.Bytes(), []byte("\n")); !bytes.Equal(tok, want) {
			t.Fatalf("AppendString(%q) = %s, encoding/json writes %s", s, tok, want)
		}
		if b := AppendStringBytes(nil, []byte(s)); !bytes.Equal(b, tok) {
			t.Fatalf("AppendStringBytes(%q) = %s, AppendString %s", s, b, tok)
		}
		html, _ := json.Marshal(s)
		if got := AppendStringHTML(nil, s); !bytes.Equal(got, html) {
			t.Fatalf("AppendStringHTML(%q) = %s, json.Marshal writes %s", s, got, html)
		}
	})
}

// BenchmarkAppendString writes 10 KB of chat text with a few escapes.
func BenchmarkAppendString(b *testing.B) {
	text := strings.Repeat("The sea is wide and calm today; \"quoted\" and café. ", 200)
	buf := make([]byte, 0, 2*len(text))
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendString(buf[:0], text)
	}
}

// FuzzUnquote holds the string decoder to encoding/json's.
func FuzzUnquote(f *testing.F) {
	for _, s := range []string{`""`, `"a\"b\\c\/d\b\f\n\r\t"`, `"\u00e9\ud83d\ude00"`, `"\ud800x"`, `"\udc00\ud800\u0041"`, `"\ud83d\u0041"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, tok []byte) {
		var want string
		if json.Unmarshal(tok, &want) != nil || tok[0] != '"' || tok[len(tok)-1] != '"' || !utf8.Valid(tok) {
			return
		}
		if got, err := Unquote(tok); err != nil || got != want {
			t.Fatalf("Unquote(%s) = %q, %v; want %q", tok, got, err, want)
		}
	})
}

// BenchmarkValid is the validation of a 100 KB chat body: a hundred
// messages of plain text, the common case every chat request pays for.
func BenchmarkValid(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"model":"llama3.1:8b","stream":false,"messages":[{"role":"system","content":"You are a helpful assistant."}`)
	for i := range 100 {
		sb.WriteString(`,{"role":"user","content":"`)
		sb.WriteString(strings.Repeat(fmt.Sprintf("message %d says something useful. ", i), 30))
		sb.WriteString(`"}`)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := Valid(body); err != nil {
			b.Fatal(err)
		}
	}
}
