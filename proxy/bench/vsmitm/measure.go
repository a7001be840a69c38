package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"
)

const (
	// warmup requests per path before the sequential phase: handshakes,
	// leaf certificates, connection pools.
	warmup = 20
	// downloadRounds downloads per path; the median speed is reported.
	downloadRounds  = 3
	downloadTimeout = 10 * time.Minute
)

// result holds one path's figures.
type result struct {
	seqP50, seqP90   time.Duration // sequential small requests
	rps              float64       // concurrent small requests per second
	concP50, concP90 time.Duration // their latency
	dlMiBps          float64       // median download speed
}

// measure runs the three phases on p: sequential small requests,
// concurrent small requests, downloads.
func measure(ctx context.Context, p *path, cfg config, stderr io.Writer) (result, error) {
	var r result
	fmt.Fprintf(stderr, "vsmitm: %s: %d sequential requests\n", p.name, cfg.n)
	for range warmup {
		if _, err := p.small(ctx); err != nil {
			return r, fmt.Errorf("warm-up: %w", err)
		}
	}
	seq := make([]time.Duration, 0, cfg.n)
	for range cfg.n {
		d, err := p.small(ctx)
		if err != nil {
			return r, fmt.Errorf("sequential: %w", err)
		}
		seq = append(seq, d)
	}
	slices.Sort(seq)
	r.seqP50, r.seqP90 = quantile(seq, 0.5), quantile(seq, 0.9)

	fmt.Fprintf(stderr, "vsmitm: %s: %d clients for %s\n", p.name, cfg.conc, cfg.duration)
	lat, elapsed, err := p.concurrent(ctx, cfg.conc, cfg.duration)
	if err != nil {
		return r, fmt.Errorf("concurrent: %w", err)
	}
	r.rps = float64(len(lat)) / elapsed.Seconds()
	r.concP50, r.concP90 = quantile(lat, 0.5), quantile(lat, 0.9)

	size := int64(cfg.sizeMiB) << 20
	fmt.Fprintf(stderr, "vsmitm: %s: %d downloads of %d MiB\n", p.name, downloadRounds, cfg.sizeMiB)
	speeds := make([]float64, 0, downloadRounds)
	for range downloadRounds {
		d, err := p.download(ctx, size)
		if err != nil {
			return r, fmt.Errorf("download: %w", err)
		}
		speeds = append(speeds, float64(cfg.sizeMiB)/d.Seconds())
	}
	slices.Sort(speeds)
	r.dlMiBps = speeds[len(speeds)/2]
	return r, nil
}

// small makes one small request and checks both substitutions: the API
// answers only the secret, and echoes it, which a proxy must turn back
// into the token name.
func (p *path) small(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, smallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", p.base+"/small", nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+p.cred)
	t0 := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("/small: read: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("/small: status %d (was the token name substituted?): %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	if want := `"authorization":"Bearer ` + p.cred + `"`; !bytes.Contains(body, []byte(want)) {
		return 0, fmt.Errorf("/small: the answer lacks %s (was the value substituted back?): %s", want, body)
	}
	return d, nil
}

// concurrent runs conc clients making small requests until d has passed
// and returns every request's latency and the time it took.
func (p *path) concurrent(ctx context.Context, conc int, d time.Duration) ([]time.Duration, time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// One request per client at once first, so the pool holds about conc
	// connections before the clock starts.
	var wg sync.WaitGroup
	errs := make([]error, conc)
	for i := range conc {
		wg.Go(func() { _, errs[i] = p.small(ctx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, 0, fmt.Errorf("warm-up: %w", err)
	}
	lats := make([][]time.Duration, conc)
	start := time.Now()
	deadline := start.Add(d)
	for i := range conc {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				l, err := p.small(ctx)
				if err != nil {
					cancel(err)
					return
				}
				lats[i] = append(lats[i], l)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return nil, 0, err
	}
	all := slices.Concat(lats...)
	slices.Sort(all)
	return all, elapsed, nil
}

// download fetches size bytes from /stream and checks every credential in
// the body: the secret directly, the token name through a proxy.
func (p *path) download(ctx context.Context, size int64) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, downloadTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", p.base+"/stream?bytes="+strconv.FormatInt(size, 10), nil)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return 0, fmt.Errorf("/stream: status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
	}
	creds := &counter{pat: []byte(p.cred)}
	secrets := &counter{pat: []byte(secret)}
	got, err := io.CopyBuffer(io.MultiWriter(creds, secrets), resp.Body, make([]byte, 256<<10))
	d := time.Since(t0)
	if err != nil {
		return 0, fmt.Errorf("/stream: read after %d bytes: %w", got, err)
	}
	chunks := size / streamChunk
	want := size
	if p.proxied() {
		want -= chunks * int64(len(secret)-len(token))
		if secrets.n != 0 {
			return 0, fmt.Errorf("/stream: %d secrets reached the client (reverse substitution missing)", secrets.n)
		}
	}
	if got != want || int64(creds.n) != chunks {
		return 0, fmt.Errorf("/stream: %d bytes with %d × %q; want %d bytes with %d", got, creds.n, p.cred, want, chunks)
	}
	return d, nil
}

// counter is an io.Writer that counts occurrences of pat in what is
// written, including those split across writes. pat must not overlap
// itself (no proper prefix of it is also a suffix).
type counter struct {
	pat  []byte
	tail []byte // the last len(pat)-1 bytes seen
	n    int
}

func (c *counter) Write(p []byte) (int, error) {
	k := len(c.pat) - 1
	if len(c.tail) > 0 {
		// Matches here straddle the boundary: tail and p[:k] are each
		// shorter than pat.
		edge := append(c.tail[:len(c.tail):len(c.tail)], p[:min(k, len(p))]...)
		c.n += bytes.Count(edge, c.pat)
	}
	c.n += bytes.Count(p, c.pat)
	if len(p) >= k {
		c.tail = append(c.tail[:0], p[len(p)-k:]...)
	} else {
		t := append(c.tail[:len(c.tail):len(c.tail)], p...)
		c.tail = append(c.tail[:0], t[len(t)-min(k, len(t)):]...)
	}
	return len(p), nil
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

// report prints the table; paths are direct, codeforge, mitmdump in that
// order.
func report(w io.Writer, cfg config, version string, paths []*path, rs []result) {
	fmt.Fprintf(w, "vsmitm: HTTPS on loopback, direct vs CodeForge proxy vs mitmdump\n")
	fmt.Fprintf(w, "go: %s %s/%s, GOMAXPROCS %d, %d CPUs (API, clients and the CodeForge proxy share this process; mitmdump is its own)\n",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), runtime.NumCPU())
	fmt.Fprintf(w, "mitmdump: %s\n", version)
	fmt.Fprintf(w, "substitution: request header token name -> secret, response body secret -> token name, checked on every request\n")
	fmt.Fprintf(w, "clients: HTTP/1.1 keep-alive; mitmdump buffers bodies (stream_large_bodies unset, its default), CodeForge streams\n")
	fmt.Fprintf(w, "note: mitmproxy 8.1 gathers a buffered body with bytes += per read, so its download time grows far faster than -size (each read copies the whole buffer so far)\n")
	fmt.Fprintf(w, "sequential: %d requests after %d warm-up; concurrent: %d clients for %s; download: %d MiB, median of %d\n\n",
		cfg.n, warmup, cfg.conc, cfg.duration, cfg.sizeMiB, downloadRounds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "path\tseq p50 ms\tseq p90 ms\tconc req/s\tconc p50 ms\tconc p90 ms\tdownload MiB/s\t\n")
	for i, p := range paths {
		r := rs[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%s\t%s\t%.1f\t\n", p.name, ms(r.seqP50), ms(r.seqP90), r.rps, ms(r.concP50), ms(r.concP90), r.dlMiBps)
	}
	tw.Flush()
	if len(rs) == 3 {
		direct, cf, mitm := rs[0], rs[1], rs[2]
		fmt.Fprintf(w, "\nadded at the median (sequential): codeforge +%s ms, mitmdump +%s ms\n",
			ms(cf.seqP50-direct.seqP50), ms(mitm.seqP50-direct.seqP50))
		fmt.Fprintf(w, "codeforge / mitmdump: %.1fx requests/s, %.1fx download throughput\n",
			cf.rps/mitm.rps, cf.dlMiBps/mitm.dlMiBps)
	}
}
