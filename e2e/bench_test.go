package e2e

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkDockerExecuteCode measures, in one run and interleaved,
// execute_code with console.log(1) through MCP on the Docker backend
// against a bare `docker exec -i <sandbox> deno run -` of the same code,
// and reports both medians and what the server adds (target: under 15 ms).
//
//	go test -count=1 -run '^$' -bench DockerExecuteCode -benchtime 30x ./e2e/
func BenchmarkDockerExecuteCode(b *testing.B) {
	st := startStack(b)
	cs := st.connect(b, nil)
	sandbox := st.container(b, "sandbox")
	const code = "console.log(1)"

	viaMCP := func() time.Duration {
		start := time.Now()
		res := run(b, cs, code, nil)
		d := time.Since(start)
		if res.IsError || stdout(res) != "1\n" {
			b.Fatalf("execute_code: %s", text(res))
		}
		return d
	}
	bare := func() time.Duration {
		cmd := exec.Command("docker", "exec", "-i", "-u", "10001:10001", "-e", "DENO_DIR=/tmp/bench-deno-dir",
			sandbox, "deno", "run", "--no-prompt", "-")
		cmd.Stdin = strings.NewReader(code)
		start := time.Now()
		out, err := cmd.Output()
		d := time.Since(start)
		if err != nil || string(out) != "1\n" {
			b.Fatalf("docker exec deno: %v %q", err, out)
		}
		return d
	}
	// The fixed cost of the docker CLI and an exec, without Deno: tells
	// how much of the bare figure is the CLI starting up.
	execTrue := func() time.Duration {
		start := time.Now()
		if out, err := exec.Command("docker", "exec", "-u", "10001:10001", sandbox, "true").CombinedOutput(); err != nil {
			b.Fatalf("docker exec true: %v %s", err, out)
		}
		return time.Since(start)
	}
	for range 3 { // warm every path up
		viaMCP()
		bare()
		execTrue()
	}
	var mcpTimes, bareTimes, trueTimes []time.Duration
	for b.Loop() {
		mcpTimes = append(mcpTimes, viaMCP())
		bareTimes = append(bareTimes, bare())
		trueTimes = append(trueTimes, execTrue())
	}
	m, d := median(mcpTimes), median(bareTimes)
	b.ReportMetric(ms(m), "mcp-median-ms")
	b.ReportMetric(ms(d), "bare-exec-median-ms")
	b.ReportMetric(ms(m-d), "added-ms")
	b.ReportMetric(ms(median(trueTimes)), "exec-true-median-ms")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
