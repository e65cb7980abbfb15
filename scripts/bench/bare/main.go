// Command bare is the baseline of scripts/bench.sh: Go's
// httputil.ReverseProxy with Go's default transport and nothing else. The
// one setting changed is the idle pool per host (2 by default), sized for
// the harness's ten connections, so that the baseline does not dial a new
// connection for most requests and look slower than it is. With -json it also decodes each POST body into
// map[string]any and encodes it again, the naive way a proxy that edits
// JSON would ("bare+json").
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:11592", "address to listen on")
	backend := flag.String("backend", "http://127.0.0.1:11590", "URL of the backend")
	reencode := flag.Bool("json", false, "decode and re-encode every POST body")
	flag.Parse()
	u, err := url.Parse(*backend)
	if err != nil {
		log.Fatal(err)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 64
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			pr.Out.Header["X-Forwarded-For"] = pr.In.Header["X-Forwarded-For"]
			pr.SetXForwarded()
		},
		Transport: transport,
	}
	var h http.Handler = rp
	if *reencode {
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				var v map[string]any
				if err := json.NewDecoder(r.Body).Decode(&v); err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				b, err := json.Marshal(v)
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(b))
				r.ContentLength = int64(len(b))
				r.Header.Set("Content-Length", strconv.Itoa(len(b)))
			}
			rp.ServeHTTP(w, r)
		})
	}
	log.Fatal(http.ListenAndServe(*listen, h))
}
