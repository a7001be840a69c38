package bench

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/proxy/ca"
	"github.com/codeforge/codeforge/proxy/rewrite"
)

const (
	token  = "BENCH_API_TOKEN"
	secret = "sk_live_bench_9f8e7d6c5b4a3210"
	// apiHost is the API's name; the resolver maps it to loopback.
	apiHost = "api.test"
	// streamChunk is the unit the large-body endpoints send and expect;
	// each chunk carries one credential (value downstream, name upstream).
	streamChunk = 64 << 10
)

// harness is a loopback TLS "API" plus a proxy in explicit mode, and one
// client for each path: direct to the API, and through the proxy (CONNECT,
// intercepted, with substitution).
type harness struct {
	apiURL string
	direct *http.Client
	viaPrx *http.Client
	// upload counters, set by the API's /upload handler
	upBytes, upSecrets atomic.Int64
}

func newHarness(tb testing.TB) *harness {
	tb.Helper()
	dir := tb.TempDir()
	upstream, err := ca.LoadOrCreate(filepath.Join(dir, "upstream-ca"))
	if err != nil {
		tb.Fatal(err)
	}
	leaf, err := upstream.Leaf(apiHost)
	if err != nil {
		tb.Fatal(err)
	}
	h := &harness{}
	mux := http.NewServeMux()
	// /small answers only a request that carries the real value (so the
	// latency path proves the proxy substituted it) and echoes it, so the
	// proxy has to substitute it back on the way out.
	mux.HandleFunc("/small", func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		if auth != "Bearer "+secret {
			http.Error(w, "Authorization must carry the credential value", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ok":true,"authorization":%q}`, auth)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		total, err := strconv.ParseInt(r.URL.Query().Get("bytes"), 10, 64)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		chunk := chunkWith(secret)
		w.Header().Set("Content-Type", "application/octet-stream")
		for sent := int64(0); sent < total; sent += int64(len(chunk)) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	mux.HandleFunc("/upload", func(w http.ResponseWriter, r *http.Request) {
		count := countingReader(r.Body, secret)
		n, err := io.Copy(io.Discard, count)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		h.upBytes.Add(n)
		h.upSecrets.Add(int64(count.Count()))
	})
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	api := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{*leaf}}}
	go api.ServeTLS(apiLn, "", "")
	tb.Cleanup(func() { api.Close() })
	apiPort := strconv.Itoa(apiLn.Addr().(*net.TCPAddr).Port)
	h.apiURL = "https://" + net.JoinHostPort(apiHost, apiPort)

	apiDir := filepath.Join(dir, "apis", "bench")
	if err := os.MkdirAll(apiDir, 0o755); err != nil {
		tb.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{
		"description": "benchmark API",
		"domains":     []string{apiHost},
		"credentials": map[string]string{token: secret},
		"ports":       []int{apiLn.Addr().(*net.TCPAddr).Port},
		// The upload measurement substitutes in a large body.
		"substitute_in": []string{"headers", "body"},
		"active":        true,
	})
	if err := os.WriteFile(filepath.Join(apiDir, "config.json"), cfg, 0o600); err != nil {
		tb.Fatal(err)
	}
	set, err := apis.Load(filepath.Join(dir, "apis"), func(string) (string, bool) { return "", false })
	if err != nil {
		tb.Fatal(err)
	}
	proxyCA, err := ca.LoadOrCreate(filepath.Join(dir, "proxy-ca"))
	if err != nil {
		tb.Fatal(err)
	}
	prxLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p, err := proxy.New(proxy.Options{
		APIs:      set,
		CA:        proxyCA,
		PublicURL: "http://" + prxLn.Addr().String(),
		Resolver: func(_ context.Context, host string) ([]netip.Addr, error) {
			if host == apiHost {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, fmt.Errorf("bench resolver: unknown host %q", host)
		},
		UpstreamRoots:         pool(upstream),
		AllowPrivateUpstreams: true,
	})
	if err != nil {
		tb.Fatal(err)
	}
	go p.Serve(prxLn)
	tb.Cleanup(func() { p.Close() })
	run, err := p.Open(context.Background(), proxy.RunSpec{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { run.Finish(context.Background()) })
	proxyURL, err := url.Parse(run.ProxyURL())
	if err != nil {
		tb.Fatal(err)
	}

	h.direct = &http.Client{Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool(upstream)},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, net.JoinHostPort("127.0.0.1", apiPort))
		},
		MaxIdleConnsPerHost: 4,
	}}
	h.viaPrx = &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyURL(proxyURL),
		TLSClientConfig:     &tls.Config{RootCAs: pool(proxyCA)},
		MaxIdleConnsPerHost: 4,
	}}
	tb.Cleanup(h.direct.CloseIdleConnections)
	tb.Cleanup(h.viaPrx.CloseIdleConnections)
	return h
}

func pool(c *ca.CA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.Certificate())
	return p
}

// chunkWith returns streamChunk bytes of JSON-ish text that contain cred
// once, near the middle.
func chunkWith(cred string) []byte {
	line := []byte(`{"id":"ch_1","object":"charge","amount":2000,"currency":"usd","status":"succeeded"}` + "\n")
	b := bytes.Repeat(line, streamChunk/len(line)+1)[:streamChunk]
	copy(b[streamChunk/2:], cred)
	return b
}

// countingReader counts occurrences of s in what passes through.
func countingReader(r io.Reader, s string) *rewrite.Reader {
	rp, err := rewrite.New(map[string]string{s: s})
	if err != nil {
		panic(err)
	}
	return rp.Reader(r)
}

// small makes one small request: through the proxy with the credential's
// name in a header, direct with the value.
func (h *harness) small(c *http.Client) error {
	cred := token
	if c == h.direct {
		cred = secret
	}
	return h.smallAs(c, cred)
}

// smallAs makes one small request with cred in Authorization and checks
// both substitutions: the API answers 200 only to the real value, and the
// echo of it must come back as cred (the name, through the proxy).
func (h *harness) smallAs(c *http.Client, cred string) error {
	req, err := http.NewRequest("GET", h.apiURL+"/small", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+cred)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d (was the token name substituted?): %s", resp.StatusCode, body)
	}
	if want := `"authorization":"Bearer ` + cred + `"`; !bytes.Contains(body, []byte(want)) {
		return fmt.Errorf("the answer lacks %s (was the value substituted back?): %s", want, body)
	}
	return nil
}

// download streams n bytes from the API through c and returns how many
// credential names arrived and how many bytes.
func (h *harness) download(c *http.Client, n int64) (names int, got int64, err error) {
	resp, err := c.Get(h.apiURL + "/stream?bytes=" + strconv.FormatInt(n, 10))
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return 0, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	count := countingReader(resp.Body, token)
	got, err = io.Copy(io.Discard, count)
	return count.Count(), got, err
}

// upload sends n bytes carrying credential names through c.
func (h *harness) upload(c *http.Client, n int64) error {
	chunk := chunkWith(token)
	pr, pw := io.Pipe()
	go func() {
		for sent := int64(0); sent < n; sent += int64(len(chunk)) {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
		pw.Close()
	}()
	req, err := http.NewRequest("POST", h.apiURL+"/upload", pr)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

// TestHarness checks that the benchmark measures what it claims: the
// proxied path really substitutes, both ways, while streaming.
func TestHarness(t *testing.T) {
	h := newHarness(t)
	if err := h.small(h.direct); err != nil {
		t.Fatalf("direct: %v", err)
	}
	if err := h.small(h.viaPrx); err != nil {
		t.Fatalf("via proxy: %v", err)
	}
	// The check can fail: the token name sent straight to the API (no
	// proxy to substitute it) is refused.
	if err := h.smallAs(h.direct, token); err == nil || !strings.Contains(err.Error(), "status 401") {
		t.Fatalf("direct with the token name: %v, want status 401", err)
	}
	const n = 64 * streamChunk
	names, got, err := h.download(h.viaPrx, n)
	if err != nil {
		t.Fatal(err)
	}
	if want := n - 64*int64(len(secret)-len(token)); names != 64 || got != want {
		t.Errorf("download via proxy: %d names in %d bytes; want 64 in %d", names, got, want)
	}
	if err := h.upload(h.viaPrx, n); err != nil {
		t.Fatal(err)
	}
	if s, b := h.upSecrets.Load(), h.upBytes.Load(); s != 64 || b != n+64*int64(len(secret)-len(token)) {
		t.Errorf("upload via proxy: API saw %d secrets in %d bytes; want 64", s, b)
	}
}

func quantile(sorted []time.Duration, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := min(int(q*float64(len(sorted))), len(sorted)-1)
	return float64(sorted[i]) / float64(time.Millisecond)
}

// BenchmarkSmallRequest alternates one direct and one proxied small HTTPS
// GET on kept-alive connections and reports the latency of each path and
// what the proxy adds at the median.
func BenchmarkSmallRequest(b *testing.B) {
	h := newHarness(b)
	for range 50 { // warm up: handshakes, leaf mint, pools
		if err := h.small(h.direct); err != nil {
			b.Fatal(err)
		}
		if err := h.small(h.viaPrx); err != nil {
			b.Fatal(err)
		}
	}
	var direct, via []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := h.small(h.direct); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if err := h.small(h.viaPrx); err != nil {
			b.Fatal(err)
		}
		direct = append(direct, t1.Sub(t0))
		via = append(via, time.Since(t1))
	}
	slices.Sort(direct)
	slices.Sort(via)
	b.ReportMetric(quantile(direct, 0.5), "direct-ms-median")
	b.ReportMetric(quantile(direct, 0.9), "direct-ms-p90")
	b.ReportMetric(quantile(via, 0.5), "proxy-ms-median")
	b.ReportMetric(quantile(via, 0.9), "proxy-ms-p90")
	b.ReportMetric(quantile(via, 0.5)-quantile(direct, 0.5), "added-ms-median")
}

// heapSampler records the peak of the live-and-garbage heap object bytes
// while it runs (runtime/metrics does not stop the world).
type heapSampler struct {
	stop chan struct{}
	done chan uint64
}

const heapMetric = "/memory/classes/heap/objects:bytes"

func heapNow() uint64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func startHeapSampler() *heapSampler {
	hs := &heapSampler{stop: make(chan struct{}), done: make(chan uint64, 1)}
	go func() {
		peak := heapNow()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-hs.stop:
				hs.done <- max(peak, heapNow())
				return
			case <-tick.C:
				peak = max(peak, heapNow())
			}
		}
	}()
	return hs
}

func (hs *heapSampler) Peak() uint64 {
	close(hs.stop)
	return <-hs.done
}

// BenchmarkLargeBody streams 512 MB through the proxy, downstream (the
// secret in the body swapped back to its name) and upstream (names swapped
// for the secret), and reports the peak heap growth of the process (the
// proxy, the API and the client all live in it and all stream) over the
// idle baseline.
func BenchmarkLargeBody(b *testing.B) {
	const size = 512 << 20
	h := newHarness(b)
	if err := h.small(h.viaPrx); err != nil {
		b.Fatal(err)
	}
	measure := func(b *testing.B, transfer func() error) {
		b.SetBytes(size)
		var peak float64
		for b.Loop() {
			runtime.GC()
			base := heapNow()
			hs := startHeapSampler()
			if err := transfer(); err != nil {
				b.Fatal(err)
			}
			p := hs.Peak()
			peak = max(peak, float64(p-min(p, base))/(1<<20))
		}
		b.ReportMetric(peak, "peak-heap-growth-MB")
	}
	b.Run("download", func(b *testing.B) {
		measure(b, func() error {
			names, _, err := h.download(h.viaPrx, size)
			if err == nil && names != size/streamChunk {
				err = fmt.Errorf("%d names came back; want %d", names, size/streamChunk)
			}
			return err
		})
	})
	b.Run("upload", func(b *testing.B) {
		measure(b, func() error {
			before := h.upSecrets.Load()
			err := h.upload(h.viaPrx, size)
			if got := h.upSecrets.Load() - before; err == nil && got != size/streamChunk {
				err = fmt.Errorf("API saw %d secrets; want %d", got, size/streamChunk)
			}
			return err
		})
	})
}
