package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/runs"
	"github.com/codeforge/codeforge/sandbox"
)

// executeOutput is execute_code's structuredContent (see executeOutputSchema).
type executeOutput struct {
	RunID       string           `json:"run_id"`
	State       string           `json:"state"`
	ExitCode    int              `json:"exit_code"`
	DurationMS  int64            `json:"duration_ms"`
	TimedOut    bool             `json:"timed_out"`
	OutOfMemory bool             `json:"out_of_memory"`
	Truncated   bool             `json:"truncated"`
	Network     []proxy.NetEntry `json:"network"`
	Files       []fileOutput     `json:"files"`
}

// fileOutput is one file a run left in out/, as results list it.
type fileOutput struct {
	Name     string `json:"name"`
	MIMEType string `json:"mime_type"`
	Size     int64  `json:"size"`
	URI      string `json:"uri"`
	Inline   bool   `json:"inline"`
}

// startedOutput is execute_code's structuredContent for a background run.
type startedOutput struct {
	RunID string `json:"run_id"`
	State string `json:"state"`
}

// executeCode starts a run and, unless it is a background run, waits for
// it: foreground and background runs are the same object (package runs)
// and go through the same path (execute).
func (s *Server) executeCode(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	arrived := time.Now()
	args, err := s.parseExecuteArgs(req.Params.Arguments)
	if err != nil {
		return toolError("execute_code: %v", err), nil
	}
	set := s.opts.APIs()
	var selected []*apis.API
	if args.APIsGiven && len(args.APIs) > 0 {
		if selected, err = set.Resolve(args.APIs); err != nil {
			return toolError("execute_code: %v", err), nil
		}
	} else {
		selected = set.Active()
	}
	// A backend that is not ready yet (Docker: the sandbox has not got the
	// proxy's CA, or the proxy is not up) would fail the run in a confusing
	// way, e.g. a TLS error on the first fetch; say so plainly instead.
	if err := s.opts.Runner.Ready(ctx); errors.Is(err, sandbox.ErrNetworkDown) {
		return toolError("execute_code: %v; nothing ran, try again in a few seconds", err), nil
	} else if err != nil {
		return toolError("execute_code: CodeForge is still starting (%v); nothing ran, try again in a few seconds", err), nil
	}
	if s.opts.Settings.Debug {
		s.log.Debug("execute_code submitted", "bytes", len(args.Code), "apis", args.APIs, "timeout", args.Timeout,
			"background", args.Background, "keep_running", args.KeepRunning, "code", args.Code)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.trackRun(req.Session, cancel)()

	spec := runs.Spec{
		Background: args.Background,
		CodeBytes:  len(args.Code),
		APIs:       args.APIs,
		Timeout:    args.Timeout,
		MaxOutput:  s.opts.MaxOutput,
		Exec: func(rctx context.Context, r *runs.Run) runs.Outcome {
			return s.execute(rctx, r, args, selected, arrived)
		},
	}
	var fwd *stdoutForwarder
	if !args.Background {
		fwd = s.forwardStdout(ctx, req.Session)
		defer fwd.close()
		spec.OnStdoutLine = fwd.line
	}
	run, err := s.runMgr.Start(spec)
	if err != nil {
		return toolError("execute_code: %v", err), nil
	}
	if args.Background {
		return s.startedResult(run.Snapshot()), nil
	}

	prog := s.startProgress(ctx, req, arrived, runProgress(run))
	defer prog.stop()
	select {
	case <-run.Done():
	case <-ctx.Done():
		if args.KeepRunning {
			run.SetStdoutListener(nil)
			s.log.Info("call ended before its run: the run goes on in the background (keep_running)", "run", run.ID())
			return toolError("execute_code: the call ended before the run; run %s goes on in the background (keep_running): "+
				"use run_wait, run_status, run_output or cancel_run with this id", run.ID()), nil
		}
		run.Cancel()
		<-run.Done()
		s.log.Info("run cancelled by the client", "run", run.ID())
	}
	rec, stdout, stderr, files := run.Final()
	return s.finalResult(rec, stdout, stderr, files), nil
}

// execute runs the code of run r: a slot in the queue, a proxy identity,
// the sandbox, the network log. It is the one path of every run.
func (s *Server) execute(ctx context.Context, r *runs.Run, args executeArgs, selected []*apis.API, arrived time.Time) runs.Outcome {
	deadline := arrived.Add(args.Timeout)
	release, err := s.queue.acquire(ctx, deadline, nil)
	switch {
	case errors.Is(err, errBusy):
		return runs.Outcome{Error: fmt.Sprintf("server busy: %d runs are already waiting for a free slot (%d run at once); nothing ran, try again shortly",
			s.queue.Waiting(), s.opts.MaxConcurrent)}
	case errors.Is(err, errQueueTimeout):
		return runs.Outcome{Result: &sandbox.Result{TimedOut: true, ExitCode: -1}, Queued: time.Since(arrived)}
	case err != nil:
		return runs.Outcome{Error: "execute_code: cancelled while waiting for a free slot; nothing ran"}
	}
	defer release()
	started := time.Now()
	queued := started.Sub(arrived)
	r.Running(queued)

	rreq := sandbox.Request{
		Code:         args.Code,
		Timeout:      time.Until(deadline),
		MaxOutput:    s.opts.MaxOutput,
		ReadPaths:    typesPaths(selected),
		OnStdoutLine: r.StdoutLine,
		OnStderrLine: r.StderrLine,
		OnOutDir:     r.CollectOut,
		OutMaxBytes:  s.runMgr.Settings().Files.MaxRunBytes,
	}
	if rreq.Timeout <= 0 {
		return runs.Outcome{Result: &sandbox.Result{TimedOut: true, ExitCode: -1}, Queued: queued}
	}
	var run proxy.Run
	if s.opts.Gate != nil {
		spec := proxy.RunSpec{}
		if args.APIsGiven {
			spec.APIs = apiNames(selected)
		}
		if run, err = s.opts.Gate.Open(ctx, spec); err != nil {
			s.log.Error("proxy identity for run failed", "run", r.ID(), "err", err)
			return runs.Outcome{Error: fmt.Sprintf("execute_code: the egress proxy could not open this run: %v; nothing ran", err), Queued: queued}
		}
		rreq.ProxyURL = run.ProxyURL()
		if s.opts.Settings.YOLO {
			rreq.AllowAllHosts = true
		} else {
			rreq.AllowHosts = apis.Domains(selected)
		}
	}

	res, runErr := s.opts.Runner.Run(ctx, rreq)
	if runErr == nil && res == nil {
		runErr = errors.New("the runner returned no result")
	}

	var notes []string
	var network []proxy.NetEntry
	if run != nil {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		network, err = run.Finish(fctx)
		cancel()
		if err != nil {
			s.log.Warn("network log for run unavailable", "run", r.ID(), "err", err)
			notes = append(notes, fmt.Sprintf("network log unavailable: %v", err))
		}
	}
	s.syncAfter(context.WithoutCancel(ctx), "execute_code")

	if runErr != nil {
		if ctx.Err() != nil {
			return runs.Outcome{Error: "execute_code: cancelled; the run was stopped", Network: network, Queued: queued}
		}
		s.log.Error("sandbox run failed", "run", r.ID(), "err", runErr)
		return runs.Outcome{Error: fmt.Sprintf("execute_code: the sandbox could not run the code: %v", runErr), Network: network, Queued: queued}
	}
	if hint := s.netDeniedHint(res.Stderr, rreq.AllowHosts); hint != "" {
		notes = append(notes, hint)
	}
	return runs.Outcome{Result: res, Queued: queued, Network: network, Notes: notes}
}

// netDeniedRE finds Deno's permission error for a host the run may not
// reach.
var netDeniedRE = regexp.MustCompile(`NotCapable: Requires net access to "([^"]{1,300})"`)

// netDeniedHint explains Deno's "run again with the --allow-net flag",
// which the agent cannot do: which hosts this run may reach and how a
// user adds one. "" when the run hit no such error.
func (s *Server) netDeniedHint(stderr string, allowed []string) string {
	m := netDeniedRE.FindStringSubmatch(stderr)
	if m == nil {
		return ""
	}
	if s.opts.Gate == nil {
		return fmt.Sprintf("network: %s was refused: this server runs without its egress proxy, so code has no network at all", m[1])
	}
	reach := "no host (no API is configured)"
	if len(allowed) > 0 {
		reach = strings.Join(allowed, ", ")
	}
	return fmt.Sprintf("network: %s is not a host this run may reach (%s). "+
		"Use list_apis to see the configured APIs and pass their names in apis; "+
		"reaching another host needs an API config for it (apis/<name>/config.json) or YOLO mode, set by the user. Flags cannot be changed from code.",
		m[1], reach)
}

// finalResult turns an ended run into the tool result DESIGN.md
// specifies: stdout, labelled stderr, one plain note per condition, the
// files (images inline, the rest as resource links), structuredContent.
// A foreground execute_code and run_wait give the same result for a run.
func (s *Server) finalResult(rec *runs.Record, stdout, stderr []byte, files map[string][]byte) *mcp.CallToolResult {
	if rec.Error != "" {
		res := toolError("%s", rec.Error)
		if rec.State == runs.Interrupted || rec.State == runs.Cancelled {
			res.Content = append(res.Content, &mcp.TextContent{Text: fmt.Sprintf("run %s: %s", rec.ID, rec.State)})
		}
		return res
	}
	var content []mcp.Content
	if len(stdout) > 0 {
		content = append(content, &mcp.TextContent{Text: string(stdout)})
	}
	if len(stderr) > 0 {
		content = append(content, &mcp.TextContent{Text: "stderr:\n" + string(stderr)})
	}
	timeout := time.Duration(rec.TimeoutMS) * time.Millisecond
	queued := time.Duration(rec.QueuedMS) * time.Millisecond
	switch {
	case rec.TimedOut:
		where := "partial output above"
		if len(stdout) == 0 && len(stderr) == 0 {
			where = "no output before it"
		}
		if queued >= 100*time.Millisecond {
			where += fmt.Sprintf("; %ss of it waiting for a free slot", formatSeconds(queued.Seconds()))
		}
		content = append(content, &mcp.TextContent{Text: fmt.Sprintf("timed out after %ss (%s)", formatSeconds(timeout.Seconds()), where)})
	case rec.OutOfMemory:
		limit := ""
		if s.opts.MemoryMB > 0 {
			limit = fmt.Sprintf(" (%d MB)", s.opts.MemoryMB)
		}
		content = append(content, &mcp.TextContent{Text: "out of memory: the run exceeded the sandbox memory limit" + limit})
	case rec.ExitCode != 0:
		content = append(content, &mcp.TextContent{Text: fmt.Sprintf("exit code %d", rec.ExitCode)})
	}
	if rec.Truncated {
		content = append(content, &mcp.TextContent{Text: fmt.Sprintf("output truncated: %d bytes cut (limit %d bytes per stream)",
			rec.DroppedBytes, rec.MaxOutput)})
	}
	fileList := []fileOutput{}
	for _, f := range rec.Files {
		fo := fileOutput{Name: f.Name, MIMEType: f.MIMEType, Size: f.Size, URI: runFileURI(rec.ID, f.Name)}
		data, ok := files[f.Name]
		if runs.IsInlineImage(f.MIMEType) && f.Size <= s.opts.InlineImageBytes && ok {
			fo.Inline = true
			content = append(content, &mcp.ImageContent{Data: data, MIMEType: f.MIMEType})
		} else {
			size := f.Size
			content = append(content, &mcp.ResourceLink{URI: fo.URI, Name: f.Name, MIMEType: f.MIMEType, Size: &size,
				Description: fmt.Sprintf("out/%s of run %s (resources/read)", f.Name, rec.ID)})
		}
		fileList = append(fileList, fo)
	}
	notes := append([]string(nil), rec.Notes...)
	for _, e := range rec.Network {
		for _, n := range e.Notes {
			if note := "network: " + e.Method + " " + e.Host + e.Path + ": " + n; !slices.Contains(notes, note) {
				notes = append(notes, note)
			}
		}
	}
	for _, n := range notes {
		content = append(content, &mcp.TextContent{Text: n})
	}
	if len(content) == 0 {
		content = append(content, &mcp.TextContent{Text: "(no output)"})
	}
	network := rec.Network
	if network == nil {
		network = []proxy.NetEntry{}
	}
	return &mcp.CallToolResult{
		Content: content,
		IsError: rec.ExitCode != 0 || rec.TimedOut || rec.OutOfMemory,
		StructuredContent: executeOutput{
			RunID:       rec.ID,
			State:       string(rec.State),
			ExitCode:    rec.ExitCode,
			DurationMS:  rec.DurationMS,
			TimedOut:    rec.TimedOut,
			OutOfMemory: rec.OutOfMemory,
			Truncated:   rec.Truncated,
			Network:     network,
			Files:       fileList,
		},
	}
}

// startedResult answers execute_code {background: true}.
func (s *Server) startedResult(rec *runs.Record) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(
			"run %s started in the background (%s). run_wait {id: %q} waits for its result (the same as execute_code would give); "+
				"run_status shows how far it got, run_output reads its output, cancel_run stops it.",
			rec.ID, rec.State, rec.ID)}},
		StructuredContent: startedOutput{RunID: rec.ID, State: string(rec.State)},
	}
}

// progress sends notifications/progress about once a second while a call
// waits for a slot or runs, when the client asked for progress.
type progress struct {
	done chan struct{}
	wg   sync.WaitGroup
}

// runProgress describes run r for progress notifications: "queued" or
// "running Ns".
func runProgress(r *runs.Run) func() string {
	return func() string {
		rec := r.Snapshot()
		if rec.State == runs.Queued || rec.Started.IsZero() {
			return "queued"
		}
		return fmt.Sprintf("running %ds", int(time.Since(rec.Started).Seconds()))
	}
}

// startProgress sends progress notifications with msg() every second
// until stop, when the client asked for progress.
func (s *Server) startProgress(ctx context.Context, req *mcp.CallToolRequest, arrived time.Time, msg func() string) *progress {
	p := &progress{done: make(chan struct{})}
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return p
	}
	p.wg.Go(func() {
		ticker := time.NewTicker(time.Second)
		defer ticker.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      time.Since(arrived).Seconds(),
				Message:       msg(),
			})
			if err != nil && ctx.Err() == nil {
				s.log.Debug("progress notification failed", "err", err)
			}
		}
	})
	return p
}

func (p *progress) stop() {
	close(p.done)
	p.wg.Wait()
}

// stdoutForwarder streams stdout lines to the client as logging
// notifications (level info, logger "stdout") without ever blocking the
// run: lines beyond a small buffer are dropped, and counted.
type stdoutForwarder struct {
	mu      sync.Mutex
	closed  bool
	lines   chan string
	wg      sync.WaitGroup
	dropped atomic.Int64
	log     *slog.Logger
}

func (s *Server) forwardStdout(ctx context.Context, ss *mcp.ServerSession) *stdoutForwarder {
	f := &stdoutForwarder{log: s.log}
	if ss == nil {
		return f
	}
	f.lines = make(chan string, 256)
	f.wg.Go(func() {
		for line := range f.lines {
			if ctx.Err() != nil {
				continue
			}
			_ = ss.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Logger: "stdout", Data: line})
		}
	})
	return f
}

func (f *stdoutForwarder) line(l string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lines == nil || f.closed {
		return
	}
	select {
	case f.lines <- l:
	default:
		f.dropped.Add(1)
	}
}

// close stops forwarding; lines that come later are ignored.
func (f *stdoutForwarder) close() {
	f.mu.Lock()
	if f.lines == nil || f.closed {
		f.mu.Unlock()
		return
	}
	f.closed = true
	close(f.lines)
	f.mu.Unlock()
	f.wg.Wait()
	if n := f.dropped.Load(); n > 0 {
		f.log.Debug("stdout lines not sent as log notifications (client too slow)", "dropped", n)
	}
}

func apiNames(list []*apis.API) []string {
	names := make([]string, len(list))
	for i, a := range list {
		names[i] = a.Name
	}
	return names
}

func typesPaths(list []*apis.API) []string {
	var out []string
	for _, a := range list {
		if a.TypesPath != "" {
			out = append(out, a.TypesPath)
		}
	}
	return out
}

func toolError(format string, args ...any) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(format, args...)}},
	}
}
