package local

import (
	"slices"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/sandbox"
)

// The two benchmarks below run the same console.log(1) with the same deno
// flags: BenchmarkBareDeno as a plain subprocess, BenchmarkRunner through
// Runner.Run (scratch dir, permissions, capped output, logs). Run them
// together and compare the medians:
//
//	go test -run '^$' -bench 'BareDeno|Runner' -benchtime 100x ./sandbox/local

const benchCode = `console.log(1)`

func BenchmarkBareDeno(b *testing.B) {
	deno := newRunner(b, func(o *Options) { o.DenoPath = testenv.DenoBinary(b) }).deno
	dir := b.TempDir()
	var durations []time.Duration
	for b.Loop() {
		start := time.Now()
		out, err := BareCommand(b.Context(), deno, dir, benchCode).Output()
		durations = append(durations, time.Since(start))
		if err != nil || string(out) != "1\n" {
			b.Fatalf("bare deno: %q, %v", out, err)
		}
	}
	reportMedian(b, durations)
}

func BenchmarkRunner(b *testing.B) {
	r := newRunner(b, func(o *Options) { o.DenoPath = testenv.DenoBinary(b) })
	var durations []time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := r.Run(b.Context(), sandbox.Request{Code: benchCode, Timeout: time.Minute})
		durations = append(durations, time.Since(start))
		if err != nil || res.Stdout != "1\n" {
			b.Fatalf("Run: %+v, %v", res, err)
		}
	}
	reportMedian(b, durations)
}

// reportMedian reports the median duration in milliseconds as "median-ms".
func reportMedian(b *testing.B, durations []time.Duration) {
	b.Helper()
	if len(durations) == 0 {
		return
	}
	slices.Sort(durations)
	median := durations[len(durations)/2]
	if len(durations)%2 == 0 {
		median = (durations[len(durations)/2-1] + median) / 2
	}
	b.ReportMetric(float64(median)/float64(time.Millisecond), "median-ms")
}

// BenchmarkWarmRunner is BenchmarkRunner with a warm pool, each run
// taking a process that is already started (as an agent's calls, spaced
// by its thinking, find them): compare with BenchmarkBareDeno.
func BenchmarkWarmRunner(b *testing.B) {
	r := newRunner(b, func(o *Options) { o.DenoPath = testenv.DenoBinary(b); o.PoolSize = 2 })
	req := sandbox.Request{Code: benchCode, Timeout: time.Minute}
	if _, err := r.Run(b.Context(), req); err != nil { // the first run starts cold and fills the pool
		b.Fatal(err)
	}
	var durations []time.Duration
	for b.Loop() {
		for r.WarmIdle() < 2 {
			time.Sleep(time.Millisecond)
		}
		start := time.Now()
		res, err := r.Run(b.Context(), req)
		durations = append(durations, time.Since(start))
		if err != nil || res.Stdout != "1\n" {
			b.Fatalf("Run: %+v, %v", res, err)
		}
	}
	reportMedian(b, durations)
}
