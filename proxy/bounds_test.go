package proxy

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"
)

// endlessHeadBytes is how much of one header line the attacks send at most:
// far past the 1 MiB cap, small enough that an uncapped proxy survives the
// test that shows it is uncapped.
const endlessHeadBytes = 32 << 20

// headOutcome is what became of a request head too large to accept.
type headOutcome struct {
	status  int   // the answer's status, 0 when none came
	readErr error // why no answer was read
	wrote   int64 // header bytes written before the proxy stopped it
	all     bool  // every byte was written: the proxy swallowed it all
}

// sendEndlessHead writes prefix and then up to size bytes of one header
// value into c while reading c for an answer, and stops as soon as one
// comes or the connection breaks.
func sendEndlessHead(t testing.TB, c net.Conn, prefix string, size int64) headOutcome {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(2 * time.Minute)) // a hang guard only
	type answer struct {
		status int
		err    error
	}
	answered := make(chan answer, 1)
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			answered <- answer{err: err}
			return
		}
		resp.Body.Close()
		answered <- answer{status: resp.StatusCode}
	}()
	var out headOutcome
	if _, err := io.WriteString(c, prefix); err != nil {
		t.Fatalf("write head start: %v", err)
	}
	chunk := []byte(strings.Repeat("a", 64<<10))
	for out.wrote < size {
		select {
		case a := <-answered:
			out.status, out.readErr = a.status, a.err
			return out
		default:
		}
		n, err := c.Write(chunk)
		out.wrote += int64(n)
		if err != nil {
			break
		}
	}
	out.all = out.wrote >= size
	if !out.all {
		a := <-answered
		out.status, out.readErr = a.status, a.err
		return out
	}
	// Everything went in: give the proxy a last chance to answer.
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	a := <-answered
	out.status, out.readErr = a.status, a.err
	return out
}

// checkCut fails unless the proxy answered 431 or closed the connection
// before the whole endless head was in.
func checkCut(t testing.TB, what string, o headOutcome) {
	t.Helper()
	if o.all {
		t.Errorf("%s: the proxy read all %d MiB of one header without answering or closing (answer %d, %v)",
			what, endlessHeadBytes>>20, o.status, o.readErr)
		return
	}
	if o.status != 0 && o.status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("%s: answer %d, want 431 or a closed connection", what, o.status)
	}
	t.Logf("%s: stopped after %.1f MiB written, answer %d (%v)", what, float64(o.wrote)/(1<<20), o.status, o.readErr)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// proxyAuth is the Proxy-Authorization header line of a run.
func proxyAuth(t testing.TB, r Run) string {
	t.Helper()
	u, err := url.Parse(r.ProxyURL())
	if err != nil {
		t.Fatal(err)
	}
	pass, _ := u.User.Password()
	return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass)) + "\r\n"
}

// rawConnect opens a CONNECT tunnel and returns the connection and the
// proxy's answer to the CONNECT.
func rawConnect(t testing.TB, addr, auth, hostport string) (net.Conn, *bufio.Reader, *http.Response, error) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "CONNECT "+hostport+" HTTP/1.1\r\nHost: "+hostport+"\r\n"+auth+"\r\n"); err != nil {
		return c, nil, nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	return c, br, resp, err
}

// TestEndlessHeadsAreCut: a request head that never ends is answered 431
// or closed after about 1 MiB, wherever the proxy reads one: inside a TLS
// tunnel, inside a plain tunnel, as a plain proxy request, as the CONNECT
// itself, and at a transparent-mode peek.
func TestEndlessHeadsAreCut(t *testing.T) {
	t.Parallel()
	tp := startProxy(t)
	up := newUpstream(t, nil)
	plainUp := startUpstream(t, nil, false, testPKI(t).leaf)
	r, _ := tp.open(t)
	auth := proxyAuth(t, r)
	const header = "X-Endless: "

	t.Run("TLS tunnel", func(t *testing.T) {
		t.Parallel()
		tc, _ := tp.tunnel(t, r, "api.test:"+up.port, "api.test")
		checkCut(t, "inner head", sendEndlessHead(t, tc, "GET / HTTP/1.1\r\nHost: api.test:"+up.port+"\r\n"+header, endlessHeadBytes))
	})
	t.Run("plain tunnel", func(t *testing.T) {
		t.Parallel()
		c, br, resp, err := rawConnect(t, tp.addr, auth, "api.test:"+plainUp.port)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		bc := &bufConn{Conn: c, r: br}
		checkCut(t, "inner plain head", sendEndlessHead(t, bc, "GET / HTTP/1.1\r\nHost: api.test:"+plainUp.port+"\r\n"+header, endlessHeadBytes))
	})
	t.Run("plain proxy request", func(t *testing.T) {
		t.Parallel()
		c, err := net.Dial("tcp", tp.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkCut(t, "plain proxy head", sendEndlessHead(t, c, "GET http://api.test:"+plainUp.port+"/ HTTP/1.1\r\nHost: api.test\r\n"+auth+header, endlessHeadBytes))
	})
	t.Run("CONNECT", func(t *testing.T) {
		t.Parallel()
		c, err := net.Dial("tcp", tp.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkCut(t, "CONNECT head", sendEndlessHead(t, c, "CONNECT api.test:443 HTTP/1.1\r\nHost: api.test:443\r\n"+auth+header, endlessHeadBytes))
	})
	t.Run("transparent peek", func(t *testing.T) {
		t.Parallel()
		front := transparentFront(t, tp, netip.MustParseAddrPort("127.0.0.1:"+plainUp.port))
		c, err := net.Dial("tcp", front)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkCut(t, "transparent peek", sendEndlessHead(t, c, "GET / HTTP/1.1\r\nHost: api.test\r\n"+header, endlessHeadBytes))
	})
	t.Run("transparent TLS", func(t *testing.T) {
		t.Parallel()
		front := transparentFront(t, tp, netip.MustParseAddrPort("127.0.0.1:"+up.port))
		raw, err := net.Dial("tcp", front)
		if err != nil {
			t.Fatal(err)
		}
		defer raw.Close()
		pool := x509.NewCertPool()
		pool.AddCert(tp.ca.Certificate())
		tc := tls.Client(raw, &tls.Config{ServerName: "api.test", RootCAs: pool})
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		checkCut(t, "transparent inner head", sendEndlessHead(t, tc, "GET / HTTP/1.1\r\nHost: api.test\r\n"+header, endlessHeadBytes))
	})
	t.Run("control API", func(t *testing.T) {
		t.Parallel()
		h, err := tp.p.ControlHandler(strings.Repeat("k", 32))
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := newControlServer(h, slog.New(slog.DiscardHandler))
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		checkCut(t, "control head", sendEndlessHead(t, c, "POST /v1/runs HTTP/1.1\r\nHost: proxy-control\r\n"+header, endlessHeadBytes))
	})
	t.Cleanup(func() {
		if n := len(up.seen()) + len(plainUp.seen()); n != 0 {
			t.Errorf("upstreams saw %d requests", n)
		}
	})
}

// heapAllocs is the total the Go heap has allocated so far.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestHostileRunKeepsProxyMemoryFlat is the memory attack, run by
// one run against the real proxy: 30 parallel requests with 8 MiB heads,
// each in its own TLS tunnel. The proxy may allocate a little for each
// (the first MiB of the head it reads before refusing), never the heads
// themselves: the test bounds what the whole test process allocates
// (client included) while the attack runs, which bounds the peak heap.
// Another run's request goes through meanwhile and after. Not parallel:
// it measures the process.
func TestHostileRunKeepsProxyMemoryFlat(t *testing.T) {
	tp := startProxy(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "fine") })
	attacker, _ := tp.open(t)
	_, victim := tp.open(t)

	const parallel, headSize = 30, 8 << 20
	tunnels := make([]*tls.Conn, parallel)
	for i := range tunnels {
		tunnels[i], _ = tp.tunnel(t, attacker, "api.test:"+up.port, "api.test")
	}
	h := startHeapPeak()
	before := heapAllocs()
	var wg sync.WaitGroup
	outcomes := make([]headOutcome, parallel)
	for i, tc := range tunnels {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcomes[i] = sendEndlessHead(t, tc, "GET / HTTP/1.1\r\nHost: api.test:"+up.port+"\r\nX-Big: ", headSize)
		}()
	}
	// Another run is served while the attack runs.
	resp, body := do(t, victim, http.MethodGet, up.url("api.test", "/victim"), nil, nil)
	wg.Wait()
	allocated := heapAllocs() - before
	grown := h.growth()
	if resp.StatusCode != http.StatusOK || body != "fine" {
		t.Errorf("another run during the attack: status %d %q", resp.StatusCode, body)
	}
	unanswered := 0
	for _, o := range outcomes {
		// An 8 MiB head may be written whole before the refusal arrives
		// (socket buffers); what counts is that a refusal arrives.
		if o.status != http.StatusRequestHeaderFieldsTooLarge && (o.readErr == nil || isTimeout(o.readErr)) {
			unanswered++
		}
	}
	t.Logf("%d parallel %d MiB heads: %.1f MiB allocated, heap peak +%.1f MiB, %d left unanswered",
		parallel, headSize>>20, float64(allocated)/(1<<20), float64(grown)/(1<<20), unanswered)
	if unanswered > 0 {
		t.Errorf("%d of %d requests with an %d MiB head were neither refused (431) nor closed", unanswered, parallel, headSize>>20)
	}
	// Uncapped, the 30 heads took 1.2 GB of allocations and a heap peak of
	// over 400 MiB. Capped, net/http's line reader allocates about 7 MiB
	// while reading the first MiB of each (its buffer grows in steps) and
	// holds about 2 MiB at a time.
	if allocated > 512<<20 {
		t.Errorf("the attack made the process allocate %d MiB; want under 512 MiB", allocated>>20)
	}
	if grown > 200<<20 {
		t.Errorf("the heap grew by %d MiB during the attack; want under 200 MiB", grown>>20)
	}
	resp, body = do(t, victim, http.MethodGet, up.url("api.test", "/after"), nil, nil)
	if resp.StatusCode != http.StatusOK || body != "fine" {
		t.Errorf("another run after the attack: status %d %q", resp.StatusCode, body)
	}
}

// TestRunTunnelAndRequestCaps: a run that opens more tunnels, or has more
// requests in flight, than its caps gets 429s that name the limit and how
// to raise it, and the refusals are in its network log; another run is
// not affected.
func TestRunTunnelAndRequestCaps(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "fine")
	})
	tp := startProxy(t)
	attacker, _ := tp.open(t)
	victimRun, victim := tp.open(t)
	auth := proxyAuth(t, attacker)

	// Tunnels: open far more than the default cap.
	var refused []*http.Response
	opened := 0
	for i := 0; i < DefaultMaxTunnelsPerRun+20; i++ {
		_, _, resp, err := rawConnect(t, tp.addr, auth, "api.test:"+up.port)
		if err != nil {
			t.Fatalf("CONNECT %d: %v", i, err)
		}
		if resp.StatusCode == http.StatusOK {
			opened++
			continue
		}
		refused = append(refused, resp)
	}
	if opened != DefaultMaxTunnelsPerRun || len(refused) != 20 {
		t.Errorf("opened %d tunnels and %d were refused; want %d and 20", opened, len(refused), DefaultMaxTunnelsPerRun)
	}
	for _, resp := range refused[:min(1, len(refused))] {
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get(errorHeader) != "too_many_tunnels" {
			t.Errorf("refused CONNECT: %d %q", resp.StatusCode, resp.Header.Get(errorHeader))
		}
		mustContain(t, "tunnel refusal", string(body), fmt.Sprint(DefaultMaxTunnelsPerRun), "PROXY_MAX_TUNNELS_PER_RUN")
	}
	// The victim still gets through while the attacker holds every tunnel.
	if resp, body := do(t, victim, http.MethodGet, up.url("api.test", "/"), nil, nil); resp.StatusCode != http.StatusOK || body != "fine" {
		t.Errorf("another run while the tunnels are held: %d %q", resp.StatusCode, body)
	}

	// Requests in flight: a fresh run sends more slow requests at once than
	// its cap, each in its own tunnel (so the tunnel cap is not what bites).
	busy, busyClient := tp.open(t)
	n := DefaultMaxRequestsPerRun + 8
	statuses := make(chan int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := busyClient.Get(up.url("api.test", "/slow"))
			if err != nil {
				statuses <- 0
				return
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				mustContain(t, "in-flight refusal", string(body), fmt.Sprint(DefaultMaxRequestsPerRun), "PROXY_MAX_REQUESTS_PER_RUN")
			}
			statuses <- resp.StatusCode
		}()
	}
	// The refused ones come back at once; then the victim is served while
	// the rest are still in flight.
	got := map[int]int{}
	for i := 0; i < 8; i++ {
		got[<-statuses]++
	}
	if resp, body := do(t, victim, http.MethodGet, up.url("api.test", "/"), nil, nil); resp.StatusCode != http.StatusOK || body != "fine" {
		t.Errorf("another run while the requests are in flight: %d %q", resp.StatusCode, body)
	}
	close(release)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		got[s]++
	}
	if got[http.StatusTooManyRequests] != 8 || got[http.StatusOK] != DefaultMaxRequestsPerRun {
		t.Errorf("statuses %v; want %d OK and 8 refused with 429", got, DefaultMaxRequestsPerRun)
	}
	entries, err := busy.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	blocked := 0
	for _, e := range entries {
		if e.Blocked == "too_many_requests" && e.Status == http.StatusTooManyRequests {
			blocked++
		}
	}
	if blocked != 8 {
		t.Errorf("network log has %d too_many_requests entries, want 8: %+v", blocked, entries)
	}
	entries, err = attacker.Finish(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	blocked = 0
	for _, e := range entries {
		if e.Blocked == "too_many_tunnels" {
			blocked++
		}
	}
	if blocked != 20 {
		t.Errorf("network log has %d too_many_tunnels entries, want 20", blocked)
	}
	if _, err := victimRun.Finish(t.Context()); err != nil {
		t.Fatal(err)
	}
}
