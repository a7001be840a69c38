package docker

import (
	"context"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/codeforge/codeforge/internal/dockertest"
	"github.com/codeforge/codeforge/sandbox"
)

// BenchmarkDockerRunner measures, in one run and interleaved, the time to
// get console.log(1)'s output three ways on the same sandbox container:
//
//   - runner: Runner.Run through the socket filter and codeforge-run,
//     with a warm pool of 2 (the default);
//   - bare-cli: `docker exec -i <sandbox> deno run -` with the code on
//     stdin (the baseline; includes the docker CLI's own start);
//   - bare-api: the same exec made with the Go client straight on the
//     engine's socket (no CLI start, no filter, no wrapper).
//
// It reports the median of each in ms and the runner's added ms over both
// baselines. Run with: go test ./sandbox/docker -run '^$' -bench DockerRunner -benchtime 30x
func BenchmarkDockerRunner(b *testing.B) {
	sb := dockertest.Start(b, dockertest.Options{})
	r, err := New(Options{DockerHost: sb.FilterHost, PoolSize: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	engine, err := client.New(client.WithHost("unix:///var/run/docker.sock"))
	if err != nil {
		b.Fatal(err)
	}
	defer engine.Close()
	ctx := context.Background()
	const code = "console.log(1)"
	runnerRun := func() {
		res, err := r.Run(ctx, sandbox.Request{Code: code, Timeout: 30 * time.Second})
		if err != nil || res.Stdout != "1\n" || res.ExitCode != 0 {
			b.Fatalf("runner: %+v %v", res, err)
		}
	}
	bareCLI := func() {
		cmd := exec.Command("docker", "exec", "-i", "-e", "DENO_DIR=/tmp/deno-dir", sb.ID, "/usr/local/bin/deno", "run", "-")
		cmd.Stdin = strings.NewReader(code)
		out, err := cmd.Output()
		if err != nil || string(out) != "1\n" {
			b.Fatalf("bare docker exec: %q %v", out, err)
		}
	}
	bareAPI := func() {
		dockertest.BareExec(b, engine, sb.ID, "", []string{"DENO_DIR=/tmp/deno-dir"}, []string{"/usr/local/bin/deno", "run", "-"}, code, "1\n")
	}
	// Warm up: API negotiation, deno's cache, the page cache.
	for range 3 {
		runnerRun()
		bareCLI()
		bareAPI()
	}
	var tRunner, tCLI, tAPI []time.Duration
	timeIt := func(f func(), into *[]time.Duration) {
		start := time.Now()
		f()
		*into = append(*into, time.Since(start))
	}
	for b.Loop() {
		timeIt(runnerRun, &tRunner)
		timeIt(bareCLI, &tCLI)
		timeIt(bareAPI, &tAPI)
	}
	mr, mc, ma := median(tRunner), median(tCLI), median(tAPI)
	b.ReportMetric(ms(mr), "runner-ms")
	b.ReportMetric(ms(mc), "bare-cli-ms")
	b.ReportMetric(ms(ma), "bare-api-ms")
	b.ReportMetric(ms(mr-mc), "added-ms")
	b.ReportMetric(ms(mr-ma), "added-vs-api-ms")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
