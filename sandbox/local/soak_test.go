package local

import (
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/testenv"
	"github.com/codeforge/codeforge/sandbox"
)

// soakCode writes a file, transpiles some TypeScript and prints: what a
// run would leave behind if anything stayed (its files, Deno's cache).
const soakCode = `
interface Row { id: number; name: string }
const rows: Row[] = Array.from({ length: 100 }, (_, i) => ({ id: i, name: "row" + i }));
await Deno.writeTextFile("out.json", JSON.stringify(rows));
console.log(rows.length);`

// BenchmarkSoak runs b.N runs through a Runner (warm pool of 2) as a
// long-running server would, and reports the scratch root's size and
// entries and the process's memory before and after: all flat.
//
//	go test ./sandbox/local -run '^$' -bench Soak -benchtime 2000x
func BenchmarkSoak(b *testing.B) {
	r := newRunner(b, func(o *Options) { o.DenoPath = testenv.DenoBinary(b); o.PoolSize = 2 })
	runOne := func() {
		res, err := r.Run(b.Context(), sandbox.Request{Code: soakCode, Timeout: time.Minute})
		if err != nil || res.Stdout != "100\n" {
			b.Fatalf("Run: %+v, %v", res, err)
		}
	}
	for range 5 { // the pool learns its spec; the runtime settles
		runOne()
	}
	settle := func() { time.Sleep(time.Second); runtime.GC() }
	settle()
	kb0, n0 := dirUsage(b, r.scratchRoot)
	rss0, heap0 := memory()
	for b.Loop() {
		runOne()
	}
	settle()
	kb1, n1 := dirUsage(b, r.scratchRoot)
	rss1, heap1 := memory()
	b.ReportMetric(float64(kb0), "scratch-KB-before")
	b.ReportMetric(float64(kb1), "scratch-KB-after")
	b.ReportMetric(float64(n0), "entries-before")
	b.ReportMetric(float64(n1), "entries-after")
	b.ReportMetric(rss0, "rss-MB-before")
	b.ReportMetric(rss1, "rss-MB-after")
	b.ReportMetric(heap0, "heap-MB-before")
	b.ReportMetric(heap1, "heap-MB-after")
}

// dirUsage is the disk use (KB, by blocks) and number of entries under dir.
func dirUsage(b *testing.B, dir string) (kb int64, entries int) {
	b.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil // a warm process's files may go away meanwhile
		}
		entries++
		if fi, err := d.Info(); err == nil {
			kb += (fi.Size() + 1023) / 1024
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return kb, entries
}

// memory is this process's resident set and Go heap in use, in MB.
func memory() (rss, heap float64) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	heap = float64(ms.HeapInuse) / (1 << 20)
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			rss = n / 1024
		}
	}
	return rss, heap
}

// BenchmarkIdlePool reports what an idle warm pool of 2 costs: the
// resident and proportional set sizes of its deno processes, summed.
//
//	go test ./sandbox/local -run '^$' -bench IdlePool -benchtime 1x
func BenchmarkIdlePool(b *testing.B) {
	for b.Loop() {
		r := newRunner(b, func(o *Options) { o.DenoPath = testenv.DenoBinary(b); o.PoolSize = 2 })
		if _, err := r.Run(b.Context(), sandbox.Request{Code: `console.log(1)`, Timeout: time.Minute}); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for r.WarmIdle() < 2 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(time.Second)
		var rss, pss float64
		n := 0
		r.pool.Each(func(w *warmProc) {
			rss += procKB(w.cmd.Process.Pid, "status", "VmRSS:") / 1024
			pss += procKB(w.cmd.Process.Pid, "smaps_rollup", "Pss:") / 1024
			n++
		})
		b.ReportMetric(float64(n), "warm-processes")
		b.ReportMetric(rss, "idle-pool-rss-MB")
		b.ReportMetric(pss, "idle-pool-pss-MB")
		r.Close()
	}
}

// procKB reads a "Key: N kB" line of /proc/pid/file.
func procKB(pid int, file, key string) float64 {
	data, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, key); ok {
			n, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return n
		}
	}
	return 0
}
