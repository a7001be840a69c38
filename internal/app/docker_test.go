package app

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/proxy/ca"
	"github.com/codeforge/codeforge/proxy/gate"
)

// TestControlGateFollowsARecreatedToken: the proxy makes a new control
// token when its token file is gone (a volume recreated, the file
// deleted). The server's gate must pick the new token up at the next run;
// it once kept the first token forever, and every run failed until the
// server restarted.
func TestControlGateFollowsARecreatedToken(t *testing.T) {
	t.Parallel()
	authority, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	px, err := proxy.New(proxy.Options{APIs: &apis.Set{}, CA: authority, PublicURL: "http://127.0.0.1:3128"})
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	// The real control API, behind a switch that stands for the proxy
	// restarting with another token.
	var current atomic.Pointer[http.Handler]
	install := func(token string) {
		h, err := px.ControlHandler(token)
		if err != nil {
			t.Fatal(err)
		}
		current.Store(&h)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*current.Load()).ServeHTTP(w, r) }))
	defer srv.Close()

	tokenFile := filepath.Join(t.TempDir(), "control-token")
	first, second := strings.Repeat("a", 32), strings.Repeat("b", 32)
	install(first)
	writeFile(t, tokenFile, first+"\n")
	g := &controlGate{controlURL: srv.URL, sandboxProxyURL: "http://127.0.0.1:3128", tokenFile: tokenFile}
	open := func() error {
		run, err := g.Open(context.Background(), gate.RunSpec{})
		if err != nil {
			return err
		}
		_, err = run.Finish(context.Background())
		return err
	}
	if err := open(); err != nil {
		t.Fatalf("run with the first token: %v", err)
	}
	install(second)
	writeFile(t, tokenFile, second+"\n")
	if err := open(); err != nil {
		t.Fatalf("run after the proxy made a new token: %v (the gate kept the old one)", err)
	}
}
