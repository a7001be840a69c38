package server

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/sandbox"
	"github.com/codeforge/codeforge/sandbox/local"
)

// BenchmarkExecuteCode measures, in one run, execute_code with
// console.log(1) through the go-sdk client over HTTP (local backend, with
// the in-process proxy as in `serve`, warm pool of 2 as `serve` sets it)
// against a bare `deno run` of the same code with the same flags,
// alternating the two. It reports the median of each and the median the
// server adds (target: the server's median at most 8 ms).
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

// BenchmarkConcurrentSessions measures throughput under load: 50 MCP
// sessions call execute_code at once, each again as soon as it has its
// answer (local backend with the in-process proxy, MaxConcurrent as
// `serve` sets it), with the warm pool off and at its default size.
// Every answer is checked. It reports runs per second.
//
//	go test ./server -run '^$' -bench ConcurrentSessions -benchtime 500x
func BenchmarkConcurrentSessions(b *testing.B) {
	for _, pool := range []int{0, sandbox.DefaultPoolSize} {
		b.Run(fmt.Sprintf("pool=%d", pool), func(b *testing.B) {
			h := newGatedHarness(b, harnessConfig{denoPath: testenv.DenoBinary(b), poolSize: pool, edit: func(o *Options) {
				o.MaxConcurrent = max(1, runtime.NumCPU()) // as serve sets it (internal/app)
				o.QueueLimit = 100
			}})
			const sessions = 50
			clients := make([]*mcp.ClientSession, sessions)
			for i := range clients {
				clients[i] = h.connect(nil)
			}
			ctx := context.Background()
			var next atomic.Int64
			total := int64(b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for _, cs := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						i := next.Add(1)
						if i > total {
							return
						}
						want := strconv.FormatInt(i, 10) + "\n"
						res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "console.log(" + strconv.FormatInt(i, 10) + ")", "timeout": 300}})
						if err != nil || res.IsError || allText(res) != want {
							b.Errorf("call %d: %v %v", i, err, res)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
		})
	}
}
