package server

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/sandbox/local"
)

// BenchmarkExecuteCode measures, in one run, execute_code with
// console.log(1) through the go-sdk client over HTTP (local backend, with
// the in-process proxy as in `serve`) against a bare `deno run` of the
// same code with the same flags, alternating the two. It reports the
// median of each and the median the server adds (target: under 15 ms).
//
//	go test ./server -run '^$' -bench BenchmarkExecuteCode -benchtime 100x
func BenchmarkExecuteCode(b *testing.B) {
	const code = "console.log(1)"
	deno := testenv.DenoBinary(b)
	h := newGatedHarness(b, harnessConfig{denoPath: deno, poolSize: 2, edit: func(o *Options) { o.MaxConcurrent = 1 }})
	bareDir := b.TempDir()
	ctx := context.Background()

	viaServer := func() time.Duration {
		start := time.Now()
		res, err := h.session.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": code}})
		d := time.Since(start)
		if err != nil || res.IsError || allText(res) != "1\n" {
			b.Fatalf("execute_code: %v %v", err, res)
		}
		return d
	}
	bare := func() time.Duration {
		cmd := local.BareCommand(ctx, deno, bareDir, code)
		start := time.Now()
		out, err := cmd.Output()
		d := time.Since(start)
		if err != nil || string(out) != "1\n" {
			b.Fatalf("bare deno: %v %q", err, out)
		}
		return d
	}
	for range 3 { // warm both caches (V8 code cache, DENO_DIR)
		viaServer()
		bare()
	}

	var server, direct []time.Duration
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			server = append(server, viaServer())
			direct = append(direct, bare())
		} else {
			direct = append(direct, bare())
			server = append(server, viaServer())
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	ms1, ms2 := median(server), median(direct)
	b.ReportMetric(ms(ms1), "server-median-ms")
	b.ReportMetric(ms(ms2), "bare-median-ms")
	b.ReportMetric(ms(ms1-ms2), "added-median-ms")
	added := make([]time.Duration, len(server))
	for i := range server {
		added[i] = server[i] - direct[i]
	}
	b.ReportMetric(ms(median(added)), "added-paired-median-ms")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
