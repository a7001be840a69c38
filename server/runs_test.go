package server

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeforge/codeforge/internal/testenv"
)

// structured decodes a result's structuredContent into a map.
func structured(t testing.TB, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	if res.StructuredContent == nil {
		t.Fatalf("no structuredContent in %q", allText(res))
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// startBackground starts code as a background run and returns its id.
func (h *harness) startBackground(t *testing.T, code string, more ...any) string {
	t.Helper()
	res := h.run(code, append([]any{"background", true}, more...)...)
	if res.IsError {
		t.Fatalf("background start: %q", allText(res))
	}
	m := structured(t, res)
	id, _ := m["run_id"].(string)
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(id) || (m["state"] != "queued" && m["state"] != "running") {
		t.Fatalf("background start structuredContent = %v", m)
	}
	if !strings.Contains(allText(res), id) || !strings.Contains(allText(res), "run_wait") {
		t.Fatalf("background start text %q does not name the id and run_wait", allText(res))
	}
	return id
}

// status calls run_status and returns its structuredContent.
func (h *harness) status(t *testing.T, id string) map[string]any {
	t.Helper()
	res := h.call("run_status", map[string]any{"id": id})
	if res.IsError {
		t.Fatalf("run_status: %q", allText(res))
	}
	return structured(t, res)
}

// TestBackgroundRunWaitStatusOutput: a background run returns at once,
// its status shows it running with its output so far, run_output pages
// through it, and run_wait gives the result a foreground call gives.
func TestBackgroundRunWaitStatusOutput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	code := `for (let i = 0; i < 5; i++) console.log("line " + i);
console.error("warn é");
await Deno.readTextFile("../go-" + "never").catch(() => {});
while (!(await Deno.stat("gate").catch(() => null))) await new Promise((r) => setTimeout(r, 50));
console.log("done");`
	// The run waits for a file named gate in its scratch directory, which
	// it creates itself after a while: long enough to be seen running.
	code = strings.Replace(code, `while (!(await`, `setTimeout(() => Deno.writeTextFileSync("gate", ""), 3000);
while (!(await`, 1)
	id := h.startBackground(t, code, "timeout", 60)

	waitFor(t, "the run to print its first lines", func() bool {
		st := h.status(t, id)
		return st["state"] == "running" && strings.Contains(st["stdout_tail"].(string), "line 4")
	})
	st := h.status(t, id)
	if st["ended"] != nil || st["exit_code"] != nil || st["background"] != true || st["started"] == nil {
		t.Fatalf("status while running = %v", st)
	}
	if !strings.Contains(st["stderr_tail"].(string), "warn é") {
		t.Fatalf("stderr_tail = %q", st["stderr_tail"])
	}

	// Page through stdout while it runs: 7 bytes at a time.
	var got strings.Builder
	offset := 0
	for {
		res := h.call("run_output", map[string]any{"id": id, "offset": offset, "limit": 7})
		if res.IsError {
			t.Fatalf("run_output: %q", allText(res))
		}
		m := structured(t, res)
		if int(m["offset"].(float64)) != offset || m["final"] != false {
			t.Fatalf("page = %v", m)
		}
		got.WriteString(allText(res))
		offset = int(m["next_offset"].(float64))
		if m["eof"] == true {
			break
		}
	}
	if got.String() != "line 0\nline 1\nline 2\nline 3\nline 4\n" {
		t.Fatalf("paged stdout = %q", got.String())
	}
	// A page boundary inside "é" does not cut it.
	res := h.call("run_output", map[string]any{"id": id, "stream": "stderr", "offset": 0, "limit": 6})
	if text := allText(res); text != "warn " {
		t.Fatalf("stderr page of 6 bytes = %q, want %q (not half of é)", text, "warn ")
	}

	// run_wait with progress gives the foreground result.
	params := &mcp.CallToolParams{Name: "run_wait", Arguments: map[string]any{"id": id, "timeout": 60}}
	params.SetProgressToken("wait-1")
	res, err := h.session.CallTool(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || texts(res)[0] != "line 0\nline 1\nline 2\nline 3\nline 4\ndone\n" || texts(res)[1] != "stderr:\nwarn é\n" {
		t.Fatalf("run_wait result: IsError=%v %q", res.IsError, texts(res))
	}
	out := output(t, res)
	if out.RunID != id || out.State != "succeeded" || out.ExitCode != 0 || out.DurationMS <= 0 {
		t.Fatalf("run_wait structuredContent = %+v", out)
	}
	sawProgress := false
	for _, p := range h.events.progressSnapshot() {
		if p.ProgressToken == "wait-1" && strings.HasPrefix(p.Message, "running") {
			sawProgress = true
		}
	}
	if !sawProgress {
		t.Errorf("no progress notification while waiting: %+v", h.events.progressSnapshot())
	}
	st = h.status(t, id)
	if st["state"] != "succeeded" || st["exit_code"] != float64(0) || st["ended"] == nil || st["expires_at"] == nil {
		t.Fatalf("status after the end = %v", st)
	}
	// run_wait on an ended run gives the same again, from the store.
	again := h.call("run_wait", map[string]any{"id": id})
	if allText(again) != allText(res) {
		t.Fatalf("second run_wait %q, first %q", allText(again), allText(res))
	}
	// The run is in list_runs, with how long it is kept.
	list := structured(t, h.call("list_runs", map[string]any{"state": "succeeded"}))
	entries := list["runs"].([]any)
	if len(entries) != 1 || entries[0].(map[string]any)["id"] != id || entries[0].(map[string]any)["expires_at"] == nil ||
		!strings.Contains(list["retention"].(string), "kept for 24h") {
		t.Fatalf("list_runs = %v", list)
	}
	// A foreground run's result names its run too.
	fg := output(t, h.run(`console.log(1)`))
	if fg.RunID == "" || fg.RunID == id || fg.State != "succeeded" {
		t.Fatalf("foreground structuredContent = %+v", fg)
	}
}

// TestRunWaitTimesOutWithStatus: run_wait on a run that outlasts it
// returns the status, not an error, and the run goes on.
func TestRunWaitTimesOutWithStatus(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	id := h.startBackground(t, `console.log("tick"); await new Promise((r) => setTimeout(r, 120_000))`, "timeout", 120)
	res := h.call("run_wait", map[string]any{"id": id, "timeout": 0.5})
	if res.IsError || !strings.Contains(allText(res), "still") {
		t.Fatalf("run_wait on a running run: IsError=%v %q", res.IsError, allText(res))
	}
	if st := structured(t, res); st["state"] != "running" && st["state"] != "queued" {
		t.Fatalf("status = %v", st)
	}
	res = h.call("cancel_run", map[string]any{"id": id})
	if res.IsError || structured(t, res)["state"] != "cancelled" {
		t.Fatalf("cancel_run: %q", allText(res))
	}
}

// TestCancelRunKillsProcess: cancel_run kills the deno process, keeps the
// output so far, and a second cancel changes nothing.
func TestCancelRunKillsProcess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	id := h.startBackground(t, `console.log(Deno.pid); await new Promise((r) => setTimeout(r, 120_000))`, "timeout", 120)
	var pid int
	waitFor(t, "the run to print its pid", func() bool {
		res := h.call("run_output", map[string]any{"id": id})
		n, err := strconv.Atoi(strings.TrimSpace(allText(res)))
		pid = n
		return err == nil
	})
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("deno %d not running before cancel_run: %v", pid, err)
	}
	res := h.call("cancel_run", map[string]any{"id": id})
	if res.IsError || !strings.Contains(allText(res), "was stopped") {
		t.Fatalf("cancel_run: %q", allText(res))
	}
	waitFor(t, "the deno process to be gone", func() bool { return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) })
	waitFor(t, "the slot to be free", func() bool { return h.runner.inFlight.Load() == 0 })
	st := h.status(t, id)
	if st["state"] != "cancelled" || !strings.Contains(st["stdout_tail"].(string), strconv.Itoa(pid)) {
		t.Fatalf("status after cancel = %v", st)
	}
	again := h.call("cancel_run", map[string]any{"id": id})
	if again.IsError || !strings.Contains(allText(again), "already ended") || structured(t, again)["state"] != "cancelled" {
		t.Fatalf("second cancel_run: %q", allText(again))
	}
	wait := h.call("run_wait", map[string]any{"id": id})
	if !wait.IsError || !strings.Contains(allText(wait), "cancelled") {
		t.Fatalf("run_wait of a cancelled run: %q", allText(wait))
	}
}

// onePixelPNG is a valid 1x1 PNG.
const onePixelPNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="

// TestRunFilesOut: an image in out/ comes back inline, a CSV as a resource
// link readable with resources/read; a symlink, a directory and a file
// over the cap each get a note.
func TestRunFilesOut(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	code := `await Deno.mkdir("out");
await Deno.writeFile("out/dot.png", Uint8Array.from(atob("` + onePixelPNG + `"), (c) => c.charCodeAt(0)));
await Deno.writeTextFile("out/table.csv", "a,b\n1,2\n");
await Deno.writeTextFile("out/fake.png", "not a png");
await Deno.mkdir("out/sub");
await Deno.writeFile("out/big.bin", new Uint8Array(11 << 20));
console.log("wrote");`
	res := h.run(code)
	if res.IsError {
		t.Fatalf("IsError: %q", allText(res))
	}
	out := output(t, res)
	var image *mcp.ImageContent
	links := map[string]*mcp.ResourceLink{}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.ImageContent:
			image = c
		case *mcp.ResourceLink:
			links[c.Name] = c
		}
	}
	png, _ := base64.StdEncoding.DecodeString(onePixelPNG)
	if image == nil || image.MIMEType != "image/png" || string(image.Data) != string(png) {
		t.Fatalf("no inline PNG in %+v", res.Content)
	}
	if links["table.csv"] == nil || links["table.csv"].URI != "run://"+out.RunID+"/files/table.csv" || links["table.csv"].MIMEType != "text/csv" {
		t.Fatalf("links = %+v", links)
	}
	// A file named .png that is not one is not sent as an image.
	if links["fake.png"] == nil || links["fake.png"].MIMEType == "image/png" {
		t.Fatalf("fake.png: %+v", links["fake.png"])
	}
	text := allText(res)
	for _, want := range []string{"out/sub not kept: it is a directory", "out/big.bin not kept: it is 11 MiB, over the cap of 10 MiB per file"} {
		if !strings.Contains(text, want) {
			t.Errorf("result %q lacks the note %q", text, want)
		}
	}
	if len(out.Files) != 3 {
		t.Fatalf("files = %+v", out.Files)
	}
	read, err := h.session.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: links["table.csv"].URI})
	if err != nil || len(read.Contents) != 1 || read.Contents[0].Text != "a,b\n1,2\n" || read.Contents[0].MIMEType != "text/csv" {
		t.Fatalf("read %s = %+v, %v", links["table.csv"].URI, read, err)
	}
	read, err = h.session.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "run://" + out.RunID + "/files/dot.png"})
	if err != nil || string(read.Contents[0].Blob) != string(png) {
		t.Fatalf("read dot.png = %+v, %v", read, err)
	}
	for _, uri := range []string{"run://" + out.RunID + "/files/nope.csv", "run://" + out.RunID + "/files/..%2Fx", "run://0000000000000000/files/table.csv", "run://zz"} {
		if _, err := h.session.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: uri}); err == nil || !strings.Contains(err.Error(), "not found") {
			t.Errorf("read %s: %v, want not found", uri, err)
		}
	}
	// run://{id} has the status and output.
	read, err = h.session.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "run://" + out.RunID})
	if err != nil || !strings.Contains(read.Contents[0].Text, `"stdout":"wrote\n"`) || !strings.Contains(read.Contents[0].Text, `"state":"succeeded"`) {
		t.Fatalf("read run:// = %+v, %v", read, err)
	}
}

// TestKeepRunning: a foreground call with keep_running whose client
// cancels it leaves the run going; without it the run is stopped.
func TestKeepRunning(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := h.session.CallTool(ctx, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{
			"code": `console.log("started"); await new Promise((r) => setTimeout(r, 1500)); console.log("finished")`, "timeout": 60, "keep_running": true}})
		errc <- err
	}()
	var id string
	waitFor(t, "the run to start", func() bool {
		list := structured(t, h.call("list_runs", map[string]any{"state": "running"}))
		if rs := list["runs"].([]any); len(rs) == 1 {
			id = rs[0].(map[string]any)["id"].(string)
			return true
		}
		return false
	})
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled call: %v", err)
	}
	res := h.call("run_wait", map[string]any{"id": id, "timeout": 60})
	if res.IsError || allText(res) != "started\nfinished\n" {
		t.Fatalf("kept run's result: %q", allText(res))
	}
}

// TestRunUpdatedNotification: a client subscribed to run://{id} hears
// when the run ends.
func TestRunUpdatedNotification(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{noClient: true})
	updated := make(chan string, 10)
	h.session = h.connect(&mcp.ClientOptions{ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
		updated <- req.Params.URI
	}})
	id := h.startBackground(t, `await new Promise((r) => setTimeout(r, 1000)); console.log("ok")`)
	if err := h.session.Subscribe(context.Background(), &mcp.SubscribeParams{URI: "run://" + id}); err != nil {
		t.Fatal(err)
	}
	select {
	case uri := <-updated:
		if uri != "run://"+id {
			t.Fatalf("updated %s", uri)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no notifications/resources/updated")
	}
	if err := h.session.Subscribe(context.Background(), &mcp.SubscribeParams{URI: "skill://x"}); err == nil {
		t.Fatal("subscribing to a skill:// resource succeeded")
	}
}

// TestRunToolsBadInput: every bad argument is a plain tool error that
// starts nothing and changes nothing.
func TestRunToolsBadInput(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessConfig{})
	done := output(t, h.run(`console.log("x")`))
	before := snapshot(t, h.skillsDir)
	unknown := "0123456789abcdef"
	cases := []struct {
		tool string
		args any
		want []string
	}{
		{"run_status", map[string]any{}, []string{"id is required"}},
		{"run_status", map[string]any{"id": unknown}, []string{"no run " + unknown, "list_runs"}},
		{"run_status", map[string]any{"id": "../etc"}, []string{"not a run id", "16 lowercase hex"}},
		{"run_status", map[string]any{"id": 7}, []string{"id must be a string"}},
		{"run_status", map[string]any{"id": done.RunID, "x": 1}, []string{`unknown argument "x"`}},
		{"run_wait", map[string]any{"id": done.RunID, "timeout": 0}, []string{"more than 0 seconds"}},
		{"run_wait", map[string]any{"id": done.RunID, "timeout": -1}, []string{"more than 0 seconds"}},
		{"run_wait", map[string]any{"id": done.RunID, "timeout": 121}, []string{"over the maximum of 120s"}},
		{"run_wait", map[string]any{"id": done.RunID, "timeout": "5"}, []string{"number of seconds"}},
		{"run_wait", map[string]any{"id": unknown}, []string{"no run " + unknown}},
		{"run_output", map[string]any{"id": done.RunID, "stream": "stdin"}, []string{`stream "stdin"`, "stdout", "stderr"}},
		{"run_output", map[string]any{"id": done.RunID, "offset": -1}, []string{"offset is -1", "at least 0"}},
		{"run_output", map[string]any{"id": done.RunID, "offset": 1.5}, []string{"whole number"}},
		{"run_output", map[string]any{"id": done.RunID, "offset": 999}, []string{"past the end"}},
		{"run_output", map[string]any{"id": done.RunID, "limit": 1 << 40}, []string{"limit is", "at most 1048576"}},
		{"run_output", map[string]any{"id": done.RunID, "limit": 0}, []string{"at least 1"}},
		{"run_output", map[string]any{"id": unknown}, []string{"no run " + unknown}},
		{"cancel_run", map[string]any{"id": unknown}, []string{"no run " + unknown}},
		{"cancel_run", map[string]any{"id": ""}, []string{"not a run id"}},
		{"list_runs", map[string]any{"state": "done"}, []string{`unknown state "done"`, "succeeded"}},
		{"list_runs", map[string]any{"limit": 1000}, []string{"at most 100"}},
		{"list_runs", map[string]any{"offset": -3}, []string{"at least 0"}},
		{"list_runs", []any{}, []string{"JSON object"}},
		{"execute_code", map[string]any{"code": "1", "background": "yes"}, []string{"background must be true or false"}},
		{"execute_code", map[string]any{"code": "1", "background": true, "keep_running": true}, []string{"only background"}},
	}
	for _, c := range cases {
		t.Run(c.tool, func(t *testing.T) {
			runsBefore := structured(t, h.call("list_runs", map[string]any{}))["total"]
			h.refused(t, c.tool, c.args, c.want, before)
			if after := structured(t, h.call("list_runs", map[string]any{}))["total"]; after != runsBefore {
				t.Errorf("runs %v -> %v after bad input", runsBefore, after)
			}
		})
	}
	if st := h.status(t, done.RunID); st["state"] != "succeeded" {
		t.Fatalf("the ended run changed: %v", st)
	}
}

// TestRunsSurviveRestart runs the real codeforge binary: one run ends,
// another is in flight when the server is killed (SIGKILL). After a
// restart on the same data directory, the first is readable (output and
// files) and the second is interrupted, with the output it had flushed.
func TestRunsSurviveRestart(t *testing.T) {
	// Not parallel: it builds (a binary, an image) and would slow the
	// parallel tests that measure short timeouts.
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "codeforge")
	build := exec.Command("go", "build", "-o", bin, "./cmd/codeforge")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	deno := testenv.Deno(t)
	dataDir, skillsDir, apisDir, workDir := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()

	start := func() (*exec.Cmd, *mcp.ClientSession) {
		cmd := exec.Command(bin, "serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir, "--skills-dir", skillsDir,
			"--apis-dir", apisDir, "--memory-mb", strconv.Itoa(testMemoryMB))
		cmd.Dir = workDir
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + workDir, "DENO_BIN=" + deno, "CODEFORGE_ENV_FILE=" + filepath.Join(workDir, "none.env")}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
		urls := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			re := regexp.MustCompile(`url=(http://127\.0\.0\.1:[0-9]+/mcp)`)
			for sc.Scan() {
				if m := re.FindStringSubmatch(sc.Text()); m != nil {
					urls <- m[1]
				}
			}
			_, _ = io.Copy(io.Discard, stderr)
		}()
		var url string
		select {
		case url = <-urls:
		case <-time.After(90 * time.Second):
			t.Fatal("codeforge serve did not start")
		}
		client := mcp.NewClient(&mcp.Implementation{Name: "restart-test", Version: "1"}, nil)
		cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cmd, cs
	}
	call := func(cs *mcp.ClientSession, tool string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
		return res
	}

	cmd, cs := start()
	res := call(cs, "execute_code", map[string]any{"code": `await Deno.mkdir("out"); await Deno.writeTextFile("out/r.csv", "x\n1\n"); console.log("first")`})
	if res.IsError {
		t.Fatalf("first run: %q", allText(res))
	}
	first := structured(t, res)["run_id"].(string)
	res = call(cs, "execute_code", map[string]any{"code": `console.log("partial"); await new Promise((r) => setTimeout(r, 120_000))`,
		"timeout": 120, "background": true})
	second := structured(t, res)["run_id"].(string)
	// Wait until the store has the partial output (flushed every second).
	waitFor(t, "the second run's output to be flushed", func() bool {
		st := structured(t, call(cs, "run_status", map[string]any{"id": second}))
		return st["state"] == "running" && st["stdout_bytes"] == float64(len("partial\n"))
	})
	time.Sleep(1500 * time.Millisecond) // one more flush period, so the store has it (not a timing assertion)
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	cs.Close()

	_, cs = start()
	res = call(cs, "run_wait", map[string]any{"id": first})
	if res.IsError || texts(res)[0] != "first\n" || structured(t, res)["state"] != "succeeded" {
		t.Fatalf("first run after restart: %q", allText(res))
	}
	read, err := cs.ReadResource(context.Background(), &mcp.ReadResourceParams{URI: "run://" + first + "/files/r.csv"})
	if err != nil || read.Contents[0].Text != "x\n1\n" {
		t.Fatalf("file after restart: %+v, %v", read, err)
	}
	st := structured(t, call(cs, "run_status", map[string]any{"id": second}))
	if st["state"] != "interrupted" || st["ended"] == nil || !strings.Contains(fmt.Sprint(st["error"]), "interrupted") ||
		st["stdout_tail"] != "partial\n" {
		t.Fatalf("second run after restart: %v", st)
	}
	res = call(cs, "run_wait", map[string]any{"id": second})
	if !res.IsError || !strings.Contains(allText(res), "interrupted") {
		t.Fatalf("run_wait of the interrupted run: %q", allText(res))
	}
	list := structured(t, call(cs, "list_runs", map[string]any{}))
	if list["total"] != float64(2) {
		t.Fatalf("list_runs after restart = %v", list)
	}
}
