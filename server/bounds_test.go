package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/testenv"
)

// TestHostileRunKeepsServeMemoryFlat is the measurement of
// `codeforge serve` on the local backend, through execute_code with a real
// Deno: one run sends 30 parallel fetches with 8 MiB headers through the
// in-process proxy (it took serve from 25 MB to 1.2 GB). Each must be
// refused, the server's memory must stay flat, and another run must be
// served during and after. Not parallel: it measures the process.
func TestHostileRunKeepsServeMemoryFlat(t *testing.T) {
	const host = "api.test"
	testCA := testenv.NewCA(t)
	cert, _, _ := testCA.Leaf(t, host)
	var forwarded atomic.Int64 // attack requests that reached the API
	api := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/x") {
			forwarded.Add(1)
		}
		_, _ = io.WriteString(w, "fine")
	}))
	// net/http's own cap would answer 431 too: only the count above
	// tells the proxy's refusal from the API's.
	api.Config.MaxHeaderBytes = 64 << 20
	api.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	api.StartTLS()
	defer api.Close()
	_, port, _ := net.SplitHostPort(api.Listener.Addr().String())
	h := newGatedHarnessWith(t, harnessConfig{
		// serve's default: Deno itself needs about 40 MiB to send each
		// 8 MiB head.
		memoryMB: 512,
		apisDir:  writeAPIs(t, map[string]string{"echo": `{"description": "Echo API", "domains": ["` + host + `"]}`}),
	}, gateConfig{
		roots: testCA.Pool(),
		resolver: func(_ context.Context, name string) ([]netip.Addr, error) {
			if name == host {
				return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
			}
			return nil, fmt.Errorf("test resolver: unknown host %q", name)
		},
	})
	victim := fmt.Sprintf(`console.log(await (await fetch("https://%s:%s/victim")).text())`, host, port)
	if res := h.run(victim); res.IsError || allText(res) != "fine\n" {
		t.Fatalf("warm-up run: %s", allText(res))
	}
	attack := fmt.Sprintf(`const big = "a".repeat(8 << 20);
const rs = await Promise.allSettled(Array.from({length: 30}, (_, i) =>
  fetch("https://%s:%s/x" + i, { headers: { "X-Big": big } })));
console.log(JSON.stringify(rs.map(r => r.status === "fulfilled" ? r.value.status : "failed")));`, host, port)

	runtime.GC()
	allocs := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(allocs)
	before := allocs[0].Value.Uint64()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base, peak := ms.HeapInuse, ms.HeapInuse
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapInuse)
			}
		}
	}()
	var attackText string
	var attackErr bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		res := h.run(attack, "timeout", 120)
		attackText, attackErr = allText(res), res.IsError
	}()
	during := h.run(victim)
	wg.Wait()
	close(stop)
	sampler.Wait()
	metrics.Read(allocs)
	allocated := allocs[0].Value.Uint64() - before
	grown := peak - base

	t.Logf("attack run (error %v): %s", attackErr, attackText)
	t.Logf("30 parallel 8 MiB-header fetches through execute_code: %.1f MiB allocated, heap peak +%.1f MiB",
		float64(allocated)/(1<<20), float64(grown)/(1<<20))
	// Every fetch must have been made and refused (431, or a broken
	// connection), and the run must not have died of its own memory.
	if attackErr || !strings.HasPrefix(attackText, "[") || strings.Contains(attackText, "200") {
		t.Errorf("attack run: want 30 refused fetches, got (error %v): %s", attackErr, attackText)
	}
	if n := forwarded.Load(); n != 0 {
		t.Errorf("%d requests with an 8 MiB head reached the API", n)
	}
	if during.IsError || allText(during) != "fine\n" {
		t.Errorf("another run during the attack: %s", allText(during))
	}
	// Uncapped: 1.2 GB allocated, a heap peak of several hundred MiB.
	if allocated > 512<<20 {
		t.Errorf("the attack made serve allocate %d MiB; want under 512 MiB", allocated>>20)
	}
	if grown > 200<<20 {
		t.Errorf("serve's heap grew by %d MiB during the attack; want under 200 MiB", grown>>20)
	}
	if res := h.run(victim); res.IsError || allText(res) != "fine\n" {
		t.Errorf("another run after the attack: %s", allText(res))
	}
}
