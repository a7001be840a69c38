package proxy

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/codeforge/codeforge/settings"
)

// TestNoSecretInLogs drives every logged path in DEBUG_MODE — injection in
// header, URL and body, reverse substitution in headers and (gzip) bodies,
// blocks, upstream errors — and then looks for the real values in the log.
func TestNoSecretInLogs(t *testing.T) {
	t.Parallel()
	tp := startProxy(t, withSettings(settings.Common{Debug: true, RedactingStrings: []string{"jane@example.org"}}))
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		w.Header().Set("Location", "/next?k="+url.QueryEscape(alphaSecret2))
		if r.URL.Path == "/gzip" {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			_, _ = io.WriteString(zw, "secret "+alphaSecret)
			_ = zw.Close()
			return
		}
		if r.URL.Path == "/br" {
			w.Header().Set("Content-Encoding", "br")
			_, _ = io.WriteString(w, alphaSecret)
			return
		}
		body, _ := io.ReadAll(r.Body)
		_, _ = w.Write(body) // echo, real values included
	})
	_, c := tp.open(t)
	hdr := map[string]string{"Authorization": "Bearer ALPHA_TOKEN", "X-Mail": "jane@example.org"}
	_, body := do(t, c, "POST", up.url("api.test", "/echo?k=ALPHA_TOKEN&o=ALPHA_OTHER"), strings.NewReader("body ALPHA_TOKEN ALPHA_OTHER jane@example.org"), hdr)
	if body != "body ALPHA_TOKEN ALPHA_OTHER REDACTED" {
		t.Errorf("echo = %q", body)
	}
	big := strings.Repeat("z", 100<<10) + "ALPHA_TOKEN"
	do(t, c, "POST", up.url("api.test", "/echo"), io.MultiReader(strings.NewReader(big)), hdr)
	do(t, c, "GET", up.url("api.test", "/gzip"), nil, hdr)
	do(t, c, "GET", up.url("api.test", "/br"), nil, hdr)
	do(t, c, "DELETE", up.url("api.test", "/x?k=ALPHA_TOKEN"), nil, hdr)
	do(t, c, "GET", up.url("beta.test", "/echo?k=BETA_KEY"), nil, map[string]string{"Authorization": "BETA_KEY"})

	logs := tp.log.String()
	for _, secret := range []string{alphaSecret, alphaSecret2, url.QueryEscape(alphaSecret2), betaSecret, "jane@example.org"} {
		if strings.Contains(logs, secret) {
			t.Errorf("log holds %q:\n%s", secret, logs)
		}
	}
	// The log must have the lines the test is about, or it proves nothing.
	for _, want := range []string{"msg=req", "msg=inject", "msg=sanitize", "msg=redact", "msg=restrict", "msg=payload",
		`tokens="[ALPHA_TOKEN ALPHA_OTHER]"`, "Location: /next?k=ALPHA_OTHER", "body ALPHA_TOKEN ALPHA_OTHER REDACTED", "dir=in", "dir=out", "secret ALPHA_TOKEN"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
}
