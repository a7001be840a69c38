package proxy

import (
	"io"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/codeforge/codeforge/proxy/rewrite"
)

// heapPeak samples the heap while a transfer runs and reports the peak
// growth over the baseline taken before it.
type heapPeak struct {
	base uint64
	peak uint64
	stop chan struct{}
	done sync.WaitGroup
}

func startHeapPeak() *heapPeak {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	h := &heapPeak{base: ms.HeapInuse, peak: ms.HeapInuse, stop: make(chan struct{})}
	h.done.Add(1)
	go func() {
		defer h.done.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-tick.C:
				runtime.ReadMemStats(&ms)
				h.peak = max(h.peak, ms.HeapInuse)
			}
		}
	}()
	return h
}

func (h *heapPeak) growth() uint64 {
	close(h.stop)
	h.done.Wait()
	return h.peak - h.base
}

// patternSource yields size bytes of filler with the secret placed every
// `every` bytes, so it lands across read boundaries too.
type patternSource struct {
	left, every, n int
	secret         string
	pos            int
}

func (s *patternSource) Read(p []byte) (int, error) {
	if s.left == 0 {
		return 0, io.EOF
	}
	n := 0
	for n < len(p) && s.left > 0 {
		if s.pos%s.every == s.every-len(s.secret) && s.left >= len(s.secret) && len(p)-n >= len(s.secret) {
			copy(p[n:], s.secret)
			n += len(s.secret)
			s.left -= len(s.secret)
			s.pos += len(s.secret)
			s.n++
			continue
		}
		p[n] = 'a' + byte(s.pos%26)
		n++
		s.left--
		s.pos++
	}
	return n, nil
}

// streamSize is the download (and twice the upload) size: 200 MB, or
// 96 MB under the race detector, still well over the 64 MB heap bound a
// buffering proxy would blow.
var streamSize = map[bool]int{false: 200 << 20, true: 96 << 20}[raceDetector]

// TestLargeBodiesStreamInFlatMemory sends 200 MB down and 100 MB up through
// the proxy, both rewritten on the way, and checks that the heap of the
// whole test process (proxy, upstream and client) stays far below the
// transfer size. Not parallel: it measures the process's heap.
func TestLargeBodiesStreamInFlatMemory(t *testing.T) {
	tp := startProxy(t)
	var upCount, upBytes int
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			src := &patternSource{left: streamSize, every: 1 << 20, secret: alphaSecret}
			_, _ = io.CopyBuffer(w, src, make([]byte, 32<<10))
			return
		}
		// The recorder in newUpstream keeps only the first MiB; count the rest.
		rd := mustReplacer(t, map[string]string{alphaSecret: alphaSecret}).Reader(r.Body)
		n, _ := io.Copy(io.Discard, rd)
		upCount, upBytes = rd.Count(), int(n)
	})
	_, c := tp.open(t)
	c.Timeout = 10 * time.Minute // a liveness guard only: the race detector on a loaded machine is slow

	h := startHeapPeak()
	resp, err := c.Get(up.url("api.test", "/big"))
	if err != nil {
		t.Fatal(err)
	}
	names := mustReplacer(t, map[string]string{"ALPHA_TOKEN": "ALPHA_TOKEN", alphaSecret: alphaSecret})
	rd := names.Reader(resp.Body)
	leaked := mustReplacer(t, map[string]string{alphaSecret: ""}).Reader(rd)
	n, err := io.Copy(io.Discard, leaked)
	resp.Body.Close()
	grown := h.growth()
	if err != nil {
		t.Fatalf("download: %v after %d bytes", err, n)
	}
	wantN := streamSize / (1 << 20)
	if leaked.Count() != 0 {
		t.Errorf("download: %d real values reached the client", leaked.Count())
	}
	if rd.Count() != wantN {
		t.Errorf("download: %d token names, want %d", rd.Count(), wantN)
	}
	if want := int64(streamSize - wantN*(len(alphaSecret)-len("ALPHA_TOKEN"))); n != want {
		t.Errorf("download: %d bytes, want %d", n, want)
	}
	t.Logf("download of %d MB: heap grew by %.1f MB at peak", streamSize>>20, float64(grown)/(1<<20))
	if grown > 64<<20 {
		t.Errorf("heap grew by %d MB during a %d MB download; the body is being buffered", grown>>20, streamSize>>20)
	}

	h = startHeapPeak()
	body := &patternSource{left: streamSize / 2, every: 1 << 20, secret: "ALPHA_TOKEN"}
	req, _ := http.NewRequest(http.MethodPost, up.url("api.test", "/upload"), io.NopCloser(body))
	// alpha has method rules: a POST body without Content-Type is read as
	// a form for _method (as Rack does), which caps it at 1 MiB.
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	grown = h.growth()
	if resp.StatusCode != 200 || upCount != body.n || upCount == 0 {
		t.Errorf("upload: status %d, upstream saw %d values, want %d", resp.StatusCode, upCount, body.n)
	}
	if want := streamSize/2 + body.n*(len(alphaSecret)-len("ALPHA_TOKEN")); upBytes != want {
		t.Errorf("upload: upstream got %d bytes, want %d", upBytes, want)
	}
	t.Logf("upload of %d MB: heap grew by %.1f MB at peak", streamSize>>21, float64(grown)/(1<<20))
	if grown > 64<<20 {
		t.Errorf("heap grew by %d MB during a %d MB upload; the body is being buffered", grown>>20, streamSize>>21)
	}
}

func mustReplacer(t testing.TB, pairs map[string]string) *rewrite.Replacer {
	t.Helper()
	r, err := rewrite.New(pairs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
