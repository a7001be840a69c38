package docker

import (
	"context"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/codeforge/codeforge/internal/dockertest"
	"github.com/codeforge/codeforge/sandbox"
)

// BenchmarkDockerSoak runs b.N runs through the Docker backend (warm pool
// of 2, the default) as a long-running deployment would (code that writes a file and is
// transpiled) and reports, before and after, the sandbox's /tmp use
// (du, KB) and entries, the container's memory (its cgroup's
// memory as docker stats reports it, MB) and the runner process's Go
// heap: all flat.
// Before runpolicy gave each run its own Deno cache, every run left its
// transpiled code in /tmp/deno-dir until the 64 MB tmpfs was full.
//
//	go test ./sandbox/docker -run '^$' -bench DockerSoak -benchtime 2000x
func BenchmarkDockerSoak(b *testing.B) {
	sb := dockertest.Start(b, dockertest.Options{})
	r, err := New(Options{DockerHost: sb.FilterHost, PoolSize: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	const code = `
interface Row { id: number; name: string }
const rows: Row[] = Array.from({ length: 100 }, (_, i) => ({ id: i, name: "row" + i }));
await Deno.writeTextFile("out.json", JSON.stringify(rows));
console.log(rows.length);`
	runOne := func() {
		res, err := r.Run(context.Background(), sandbox.Request{Code: code, Timeout: time.Minute})
		if err != nil || res.Stdout != "100\n" {
			b.Fatalf("Run: %+v, %v", res, err)
		}
	}
	for range 5 {
		runOne()
	}
	measure := func() (tmpKB, entries, memMB, heapMB float64) {
		time.Sleep(time.Second)
		runtime.GC()
		out := sb.Exec(b, "sh", "-c", `du -sk /tmp | cut -f1; find /tmp | wc -l`)
		f := strings.Fields(out)
		if len(f) != 2 {
			b.Fatalf("sandbox figures: %q", out)
		}
		tmpKB, _ = strconv.ParseFloat(f[0], 64)
		entries, _ = strconv.ParseFloat(f[1], 64)
		memMB, _ = containerStats(b, sb.ID)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return tmpKB, entries, memMB, float64(ms.HeapInuse) / (1 << 20)
	}
	kb0, n0, mem0, heap0 := measure()
	for b.Loop() {
		runOne()
	}
	kb1, n1, mem1, heap1 := measure()
	b.ReportMetric(kb0, "tmp-KB-before")
	b.ReportMetric(kb1, "tmp-KB-after")
	b.ReportMetric(n0, "tmp-entries-before")
	b.ReportMetric(n1, "tmp-entries-after")
	b.ReportMetric(mem0, "sandbox-MB-before")
	b.ReportMetric(mem1, "sandbox-MB-after")
	b.ReportMetric(heap0, "heap-MB-before")
	b.ReportMetric(heap1, "heap-MB-after")
}

// BenchmarkDockerIdlePool reports what an idle pool of 2 warm execs costs
// the sandbox container: its cgroup's memory and pids with the pool
// filled, and after the runner closed it.
//
//	go test ./sandbox/docker -run '^$' -bench DockerIdlePool -benchtime 1x
func BenchmarkDockerIdlePool(b *testing.B) {
	for b.Loop() {
		sb := dockertest.Start(b, dockertest.Options{})
		r, err := New(Options{DockerHost: sb.FilterHost, PoolSize: 2, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Run(context.Background(), sandbox.Request{Code: `console.log(1)`, Timeout: time.Minute}); err != nil {
			b.Fatal(err)
		}
		deadline := time.Now().Add(time.Minute)
		for r.WarmIdle() < 2 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		cgroup := func() (memMB, pids float64) {
			time.Sleep(2 * time.Second)
			return containerStats(b, sb.ID)
		}
		mem1, pids1 := cgroup()
		r.Close()
		mem0, pids0 := cgroup()
		b.ReportMetric(mem1, "sandbox-MB-pool")
		b.ReportMetric(mem0, "sandbox-MB-no-pool")
		b.ReportMetric(mem1-mem0, "idle-pool-MB")
		b.ReportMetric(pids1-pids0, "idle-pool-tasks")
	}
}

// containerStats is a container's memory use (MB) and task count as
// `docker stats` reports them, read from the host.
func containerStats(b *testing.B, id string) (memMB, pids float64) {
	b.Helper()
	out := dockertest.Docker(b, "stats", "--no-stream", "--format", "{{.MemUsage}} {{.PIDs}}", id)
	f := strings.Fields(out) // "45.3MiB / 512MiB 12"
	if len(f) != 4 {
		b.Fatalf("docker stats: %q", out)
	}
	mem := f[0]
	scale := 1.0
	switch {
	case strings.HasSuffix(mem, "GiB"):
		scale, mem = 1024, strings.TrimSuffix(mem, "GiB")
	case strings.HasSuffix(mem, "MiB"):
		mem = strings.TrimSuffix(mem, "MiB")
	case strings.HasSuffix(mem, "KiB"):
		scale, mem = 1.0/1024, strings.TrimSuffix(mem, "KiB")
	}
	m, _ := strconv.ParseFloat(mem, 64)
	p, _ := strconv.ParseFloat(f[3], 64)
	return m * scale, p
}
