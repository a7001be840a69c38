package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestControlAPI(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, nil)
	token := strings.Repeat("ab", 32)
	h, err := tp.p.ControlHandler(token)
	if err != nil {
		t.Fatal(err)
	}
	ctl := httptest.NewServer(h)
	t.Cleanup(ctl.Close)

	// Health needs no token; everything else does.
	resp, err := http.Get(ctl.URL + "/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || strings.TrimSpace(string(body)) != `{"ok":true}` {
		t.Errorf("health: %d %s", resp.StatusCode, body)
	}
	for _, auth := range []string{"", "Bearer wrong", "Basic " + token, "Bearer " + token + "x"} {
		req, _ := http.NewRequest("POST", ctl.URL+"/v1/runs", strings.NewReader(`{}`))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("auth %q: status %d, want 401", auth, resp.StatusCode)
		}
	}
	// Unknown fields and unknown APIs are refused with a useful message.
	req, _ := http.NewRequest("POST", ctl.URL+"/v1/runs", strings.NewReader(`{"api":["alpha"]}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || !strings.Contains(string(body), `unknown field \"api\"`) {
		t.Errorf("unknown field: %d %s", resp.StatusCode, body)
	}

	if _, err := NewControlClient(ctl.URL, token, "http://user:pw@proxy:3128", nil); err == nil {
		t.Error("NewControlClient accepted a proxy URL with credentials")
	}
	cc, err := NewControlClient(ctl.URL, token, "http://"+tp.addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cc.Health(t.Context()); err != nil {
		t.Error(err)
	}
	if _, err := cc.Open(t.Context(), RunSpec{APIs: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), "alpha, beta") {
		t.Errorf("Open unknown API: err = %v, want the valid names listed", err)
	}
	run, err := cc.Open(t.Context(), RunSpec{APIs: []string{"alpha"}})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(run.ProxyURL())
	if err != nil || u.Host != tp.addr || !strings.HasPrefix(u.User.Username(), "run-") {
		t.Fatalf("ProxyURL %q", run.ProxyURL())
	}
	if pw, _ := u.User.Password(); len(pw) != 32 {
		t.Errorf("password has %d characters, want 32 hex", len(pw))
	}
	c := tp.client(t, run.ProxyURL())
	do(t, c, "GET", up.url("api.test", "/c"), nil, map[string]string{"Authorization": "Bearer ALPHA_TOKEN"})
	if r, _ := do(t, c, "GET", up.url("beta.test", "/c"), nil, nil); r.StatusCode != http.StatusForbidden {
		t.Errorf("beta from an alpha-only run: status %d", r.StatusCode)
	}
	entries, err := run.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 2 || !entries[0].Injected || entries[0].Status != 200 || entries[1].Blocked != "host_not_allowed" {
		t.Errorf("entries = %+v", entries)
	}
	if got := up.seen()[0].Header.Get("Authorization"); got != "Bearer "+alphaSecret {
		t.Errorf("upstream Authorization = %q", got)
	}
	if _, err := run.Finish(t.Context()); err == nil {
		t.Error("second Finish: no error")
	}
	// The JSON field names are the contract with the server.
	data, _ := json.Marshal(entries[0])
	for _, f := range []string{`"method"`, `"host"`, `"path"`, `"status"`, `"credential_injected"`, `"bytes_out"`, `"bytes_in"`} {
		if !strings.Contains(string(data), f) {
			t.Errorf("entry JSON %s lacks %s", data, f)
		}
	}
}
