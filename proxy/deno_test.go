package proxy

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/testenv"
)

// TestDenoThroughProxy runs real Deno fetch() through the proxy the way the
// sandbox does: HTTPS_PROXY with the run's credentials, DENO_CERT with the
// proxy CA. Deno must send Proxy-Authorization on CONNECT, trust the
// intercepted TLS, and see only token names.
func TestDenoThroughProxy(t *testing.T) {
	t.Parallel()
	deno := testenv.Deno(t)
	tp := startProxy(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		body, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, "got "+r.URL.Query().Get("k")+" "+string(body))
	})
	run, _ := tp.open(t, "alpha")
	dir := t.TempDir()
	script := filepath.Join(dir, "main.ts")
	src := `const r = await fetch("` + up.url("api.test", "/deno?k=ALPHA_TOKEN") + `", {
  method: "POST", headers: {Authorization: "Bearer ALPHA_TOKEN"}, body: "ALPHA_OTHER",
});
console.log(r.status, r.headers.get("x-echo"), await r.text());
try {
  await fetch("` + up.url("other.test", "/") + `").then((r) => console.log("other", r.status));
} catch (e) { console.log("other error", e.name); }
`
	if err := os.WriteFile(script, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	runDeno := func(proxyURL string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, deno, "run", "--allow-net=api.test,other.test", "--no-prompt", script)
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "DENO_DIR=" + filepath.Join(dir, "deno"),
			"DENO_NO_UPDATE_CHECK=1", "NO_COLOR=1",
			"HTTPS_PROXY=" + proxyURL, "HTTP_PROXY=" + proxyURL,
			"DENO_CERT=" + tp.p.CACertFile(),
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := runDeno(run.ProxyURL())
	if err != nil {
		t.Fatalf("deno: %v\n%s", err, out)
	}
	want := "200 Bearer ALPHA_TOKEN got ALPHA_TOKEN ALPHA_OTHER"
	if !strings.Contains(out, want) {
		t.Errorf("deno printed %q, want %q", out, want)
	}
	if !strings.Contains(out, "other 403") {
		t.Errorf("deno reaching an unconfigured host: %q, want a 403", out)
	}
	seen := up.seen()
	if len(seen) != 1 || seen[0].Header.Get("Authorization") != "Bearer "+alphaSecret || seen[0].Body != alphaSecret2 {
		t.Fatalf("upstream saw %+v", seen)
	}
	mustNotContain(t, "deno output", out, alphaSecret, alphaSecret2)

	// Without the run's credentials Deno gets nowhere.
	out, _ = runDeno("http://" + tp.addr)
	if strings.Contains(out, "Bearer") || !strings.Contains(out, "proxy authentication required") {
		t.Errorf("deno without credentials: %q, want a refused CONNECT", out)
	}
	if n := len(up.seen()); n != 1 {
		t.Errorf("upstream saw %d requests after the unauthenticated run", n)
	}
}
