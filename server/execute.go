package server

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/proxy"
	"github.com/codeforge/codeforge/sandbox"
)

// executeOutput is execute_code's structuredContent (see executeOutputSchema).
type executeOutput struct {
	ExitCode    int              `json:"exit_code"`
	DurationMS  int64            `json:"duration_ms"`
	TimedOut    bool             `json:"timed_out"`
	OutOfMemory bool             `json:"out_of_memory"`
	Truncated   bool             `json:"truncated"`
	Network     []proxy.NetEntry `json:"network"`
}

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
	if err := s.opts.Runner.Ready(ctx); err != nil {
		return toolError("execute_code: CodeForge is still starting (%v); nothing ran, try again in a few seconds", err), nil
	}
	if s.opts.Settings.Debug {
		s.log.Debug("execute_code submitted", "bytes", len(args.Code), "apis", args.APIs, "timeout", args.Timeout, "code", args.Code)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer s.trackRun(req.Session, cancel)()

	deadline := arrived.Add(args.Timeout)
	prog := s.startProgress(ctx, req, arrived)
	defer prog.stop()

	release, err := s.queue.acquire(ctx, deadline, prog.queued)
	switch {
	case errors.Is(err, errBusy):
		return toolError("server busy: %d runs are already waiting for a free slot (%d run at once); nothing ran, try again shortly",
			s.queue.Waiting(), s.opts.MaxConcurrent), nil
	case errors.Is(err, errQueueTimeout):
		res := &sandbox.Result{TimedOut: true, ExitCode: -1}
		return s.runResult(res, args.Timeout, time.Since(arrived), nil, nil), nil
	case err != nil:
		return toolError("execute_code: cancelled while waiting for a free slot; nothing ran"), nil
	}
	defer release()
	started := time.Now()
	prog.running(started)

	rreq := sandbox.Request{
		Code:      args.Code,
		Timeout:   time.Until(deadline),
		MaxOutput: s.opts.MaxOutput,
		ReadPaths: typesPaths(selected),
	}
	if rreq.Timeout <= 0 {
		res := &sandbox.Result{TimedOut: true, ExitCode: -1}
		return s.runResult(res, args.Timeout, time.Since(arrived), nil, nil), nil
	}
	var run proxy.Run
	if s.opts.Gate != nil {
		spec := proxy.RunSpec{}
		if args.APIsGiven {
			spec.APIs = apiNames(selected)
		}
		if run, err = s.opts.Gate.Open(ctx, spec); err != nil {
			s.log.Error("proxy identity for run failed", "err", err)
			return toolError("execute_code: the egress proxy could not open this run: %v; nothing ran", err), nil
		}
		rreq.ProxyURL = run.ProxyURL()
		if s.opts.Settings.YOLO {
			rreq.AllowAllHosts = true
		} else {
			rreq.AllowHosts = apis.Domains(selected)
		}
	}
	fwd := s.forwardStdout(ctx, req.Session)
	rreq.OnStdoutLine = fwd.line

	res, runErr := s.opts.Runner.Run(ctx, rreq)
	fwd.close()
	if n := fwd.dropped.Load(); n > 0 {
		s.log.Debug("stdout lines not sent as log notifications (client too slow)", "dropped", n)
	}
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
			s.log.Warn("network log for run unavailable", "err", err)
			notes = append(notes, fmt.Sprintf("network log unavailable: %v", err))
		}
	}
	s.syncAfter(ctx, "execute_code")

	if runErr != nil {
		if ctx.Err() != nil {
			s.log.Info("run cancelled by the client", "after", time.Since(started).Round(time.Millisecond))
			return toolError("execute_code: cancelled; the run was stopped"), nil
		}
		s.log.Error("sandbox run failed", "err", runErr)
		return toolError("execute_code: the sandbox could not run the code: %v", runErr), nil
	}
	if ctx.Err() != nil {
		s.log.Info("run cancelled by the client", "after", time.Since(started).Round(time.Millisecond))
	}
	if hint := s.netDeniedHint(res.Stderr, rreq.AllowHosts); hint != "" {
		notes = append(notes, hint)
	}
	return s.runResult(res, args.Timeout, started.Sub(arrived), network, notes), nil
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

// runResult turns a run into the tool result DESIGN.md specifies: stdout,
// labelled stderr, one plain note per condition, structuredContent.
func (s *Server) runResult(res *sandbox.Result, timeout, queued time.Duration, network []proxy.NetEntry, notes []string) *mcp.CallToolResult {
	var content []mcp.Content
	if res.Stdout != "" {
		content = append(content, &mcp.TextContent{Text: res.Stdout})
	}
	if res.Stderr != "" {
		content = append(content, &mcp.TextContent{Text: "stderr:\n" + res.Stderr})
	}
	switch {
	case res.TimedOut:
		where := "partial output above"
		if res.Stdout == "" && res.Stderr == "" {
			where = "no output before it"
		}
		if queued >= 100*time.Millisecond {
			where += fmt.Sprintf("; %ss of it waiting for a free slot", formatSeconds(queued.Seconds()))
		}
		content = append(content, &mcp.TextContent{Text: fmt.Sprintf("timed out after %ss (%s)", formatSeconds(timeout.Seconds()), where)})
	case res.OutOfMemory:
		limit := ""
		if s.opts.MemoryMB > 0 {
			limit = fmt.Sprintf(" (%d MB)", s.opts.MemoryMB)
		}
		content = append(content, &mcp.TextContent{Text: "out of memory: the run exceeded the sandbox memory limit" + limit})
	case res.ExitCode != 0:
		content = append(content, &mcp.TextContent{Text: fmt.Sprintf("exit code %d", res.ExitCode)})
	}
	if res.Truncated {
		content = append(content, &mcp.TextContent{Text: fmt.Sprintf("output truncated: %d bytes cut (limit %d bytes per stream)",
			res.DroppedBytes, s.opts.MaxOutput)})
	}
	for _, e := range network {
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
	if network == nil {
		network = []proxy.NetEntry{}
	}
	return &mcp.CallToolResult{
		Content: content,
		IsError: res.ExitCode != 0 || res.TimedOut || res.OutOfMemory,
		StructuredContent: executeOutput{
			ExitCode:    res.ExitCode,
			DurationMS:  res.Duration.Milliseconds(),
			TimedOut:    res.TimedOut,
			OutOfMemory: res.OutOfMemory,
			Truncated:   res.Truncated,
			Network:     network,
		},
	}
}

// progress sends notifications/progress about once a second while a call
// waits for a slot or runs, when the client asked for progress.
type progress struct {
	kick    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
	started atomic.Int64 // unix nanos when the run started; 0 while queued
	active  bool
}

func (s *Server) startProgress(ctx context.Context, req *mcp.CallToolRequest, arrived time.Time) *progress {
	p := &progress{kick: make(chan struct{}, 1), done: make(chan struct{})}
	token := req.Params.GetProgressToken()
	if token == nil || req.Session == nil {
		return p
	}
	p.active = true
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
			case <-p.kick:
			}
			msg := "queued"
			if st := p.started.Load(); st != 0 {
				msg = fmt.Sprintf("running %ds", int(time.Since(time.Unix(0, st)).Seconds()))
			}
			err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
				ProgressToken: token,
				Progress:      time.Since(arrived).Seconds(),
				Message:       msg,
			})
			if err != nil && ctx.Err() == nil {
				s.log.Debug("progress notification failed", "err", err)
			}
		}
	})
	return p
}

// queued reports that the call has to wait for a slot.
func (p *progress) queued() {
	if p.active {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

func (p *progress) running(at time.Time) { p.started.Store(at.UnixNano()) }

func (p *progress) stop() {
	close(p.done)
	p.wg.Wait()
}

// stdoutForwarder streams stdout lines to the client as logging
// notifications (level info, logger "stdout") without ever blocking the
// run: lines beyond a small buffer are dropped, and counted.
type stdoutForwarder struct {
	lines   chan string
	wg      sync.WaitGroup
	dropped atomic.Int64
}

func (s *Server) forwardStdout(ctx context.Context, ss *mcp.ServerSession) *stdoutForwarder {
	f := &stdoutForwarder{}
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
	if f.lines == nil {
		return
	}
	select {
	case f.lines <- l:
	default:
		f.dropped.Add(1)
	}
}

func (f *stdoutForwarder) close() {
	if f.lines == nil {
		return
	}
	close(f.lines)
	f.wg.Wait()
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
