package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/codeforge/codeforge/internal/strictjson"
	"github.com/codeforge/codeforge/proxy/gate"
	"github.com/codeforge/codeforge/runs"
)

// Tool names of the run tools (a contract, like the others).
const (
	toolRunStatus = "run_status"
	toolRunWait   = "run_wait"
	toolRunOutput = "run_output"
	toolCancelRun = "cancel_run"
	toolListRuns  = "list_runs"
)

// Limits of the run tools' arguments.
const (
	defaultWait        = 30 * time.Second
	DefaultMaxWait     = 120 * time.Second
	defaultOutputLimit = 64 << 10
	maxOutputLimit     = 1 << 20
	defaultListLimit   = 20
	maxListLimit       = 100
	// tailLines and tailBytes bound the output tails in run_status.
	tailLines = 20
	tailBytes = 4 << 10
)

const (
	runScheme       = "run://"
	runTemplate     = "run://{id}"
	runFileTemplate = "run://{id}/files/{name}"
)

func runURI(id string) string           { return runScheme + id }
func runFileURI(id, name string) string { return runScheme + id + "/files/" + name }

func (s *Server) addRunFeatures() {
	s.mcp.AddTool(&mcp.Tool{
		Name:  toolRunStatus,
		Title: "Status of a run",
		Description: "Show where a run is: state (queued, running, succeeded, failed, timed_out, cancelled, interrupted), " +
			"start and end times, exit code, output sizes, the last lines of stdout and stderr, the network log so far, its files, " +
			"and until when it is kept.",
		InputSchema:  argsSchema(props{"id": runIDSchema()}, "id"),
		OutputSchema: runStatusSchema(),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.runStatus)
	s.mcp.AddTool(&mcp.Tool{
		Name:  toolRunWait,
		Title: "Wait for a run",
		Description: "Wait up to timeout seconds for a run to end. When it ends, the result is exactly what execute_code would have returned; " +
			"if it is still going, its status (call run_wait again). Sends progress notifications while it waits.",
		InputSchema: argsSchema(props{
			"id": runIDSchema(),
			"timeout": seconds(fmt.Sprintf("Seconds to wait at most. Default %s, at most %s.",
				formatSeconds(defaultWait.Seconds()), formatSeconds(s.opts.MaxWait.Seconds())), s.opts.MaxWait.Seconds()),
		}, "id"),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.runWait)
	s.mcp.AddTool(&mcp.Tool{
		Name:  toolRunOutput,
		Title: "Read a run's output",
		Description: "Page through the stdout or stderr of a run, running or ended: limit bytes from offset. " +
			"next_offset is where the next page starts; eof says the page reached what the run has printed so far, final that it will print no more.",
		InputSchema: argsSchema(props{
			"id":     runIDSchema(),
			"stream": strEnum("Which stream. Default stdout.", "stdout", "stderr"),
			"offset": intAtLeast("Byte offset to start at. Default 0.", 0),
			"limit":  intRange(fmt.Sprintf("Bytes to return at most. Default %d.", defaultOutputLimit), 1, maxOutputLimit),
		}, "id"),
		OutputSchema: runOutputSchema(),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.runOutput)
	s.mcp.AddTool(&mcp.Tool{
		Name:         toolCancelRun,
		Title:        "Stop a run",
		Description:  "Stop a run: its whole process tree is killed; output so far is kept. Stopping a run that has ended changes nothing.",
		InputSchema:  argsSchema(props{"id": runIDSchema()}, "id"),
		OutputSchema: runStatusSchema(),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true},
	}, s.cancelRun)
	s.mcp.AddTool(&mcp.Tool{
		Name:  toolListRuns,
		Title: "List runs",
		Description: "List the runs this server keeps, newest first, a page at a time, optionally only those in one state; " +
			"each says until when it is kept.",
		InputSchema: argsSchema(props{
			"state":  stateSchema("Only runs in this state."),
			"offset": intAtLeast("Runs to skip. Default 0.", 0),
			"limit":  intRange(fmt.Sprintf("Runs to return at most. Default %d.", defaultListLimit), 1, maxListLimit),
		}),
		OutputSchema: listRunsSchema(),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, s.listRuns)

	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: runTemplate,
		Name:        "run",
		Title:       "Run",
		Description: "A run's status and its stdout and stderr as JSON; subscribe for notifications/resources/updated when it ends.",
		MIMEType:    "application/json",
	}, s.readRun)
	s.mcp.AddResourceTemplate(&mcp.ResourceTemplate{
		URITemplate: runFileTemplate,
		Name:        "run-file",
		Title:       "File a run wrote",
		Description: "A file the run wrote to out/ in its scratch directory.",
	}, s.readRunFile)
	s.runMgr.OnEnd(func(id string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.mcp.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: runURI(id)})
	})
}

// subscribe accepts subscriptions to run://{id} of a run this server keeps.
func (s *Server) subscribe(_ context.Context, req *mcp.SubscribeRequest) error {
	id, ok := strings.CutPrefix(req.Params.URI, runScheme)
	if !ok {
		return fmt.Errorf("subscriptions are offered for run://{id} resources only, not %q", truncate(req.Params.URI, 80))
	}
	if _, err := s.runMgr.Get(id); err != nil {
		return err
	}
	return nil
}

func (s *Server) unsubscribe(context.Context, *mcp.UnsubscribeRequest) error { return nil }

// runIDArg reads the required id argument.
func runIDArg(fields map[string]json.RawMessage) (string, error) {
	raw, ok := fields["id"]
	if !ok || strictjson.IsNull(raw) {
		return "", errors.New("id is required: pass the run's id, as execute_code or list_runs returned it")
	}
	var id string
	if raw[0] != '"' || json.Unmarshal(raw, &id) != nil {
		return "", fmt.Errorf("id must be a string, got %s", strictjson.Kind(raw, strictjson.ShortValue))
	}
	return id, runs.CheckID(id)
}

// intArg reads an optional whole-number argument in [lo, hi].
func intArg(fields map[string]json.RawMessage, name string, def, lo, hi int64) (int64, error) {
	raw, ok := fields[name]
	if !ok || strictjson.IsNull(raw) {
		return def, nil
	}
	var f float64
	if raw[0] == '"' || raw[0] == '[' || raw[0] == '{' || raw[0] == 't' || raw[0] == 'f' || json.Unmarshal(raw, &f) != nil {
		return 0, fmt.Errorf("%s must be a whole number, got %s", name, strictjson.Kind(raw, strictjson.ShortValue))
	}
	if f != math.Trunc(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s must be a whole number, got %s", name, truncate(string(raw), 40))
	}
	switch {
	case f < float64(lo):
		return 0, fmt.Errorf("%s is %s: it must be at least %d", name, truncate(string(raw), 40), lo)
	case f > float64(hi):
		return 0, fmt.Errorf("%s is %s: it must be at most %d", name, truncate(string(raw), 40), hi)
	}
	return int64(f), nil
}

// stringArg reads an optional string argument.
func stringArg(fields map[string]json.RawMessage, name string) (string, bool, error) {
	raw, ok := fields[name]
	if !ok || strictjson.IsNull(raw) {
		return "", false, nil
	}
	var v string
	if raw[0] != '"' || json.Unmarshal(raw, &v) != nil {
		return "", false, fmt.Errorf("%s must be a string, got %s", name, strictjson.Kind(raw, strictjson.ShortValue))
	}
	return v, true, nil
}

// runStatusOutput is run_status's structuredContent.
type runStatusOutput struct {
	ID          string          `json:"id"`
	State       string          `json:"state"`
	Background  bool            `json:"background"`
	Created     string          `json:"created"`
	Started     string          `json:"started,omitempty"`
	Ended       string          `json:"ended,omitempty"`
	QueuedMS    int64           `json:"queued_ms"`
	DurationMS  int64           `json:"duration_ms"`
	ExitCode    *int            `json:"exit_code,omitempty"`
	TimedOut    bool            `json:"timed_out"`
	OutOfMemory bool            `json:"out_of_memory"`
	Truncated   bool            `json:"truncated"`
	StdoutBytes int64           `json:"stdout_bytes"`
	StderrBytes int64           `json:"stderr_bytes"`
	StdoutTail  string          `json:"stdout_tail"`
	StderrTail  string          `json:"stderr_tail"`
	Network     []gate.NetEntry `json:"network"`
	Files       []fileOutput    `json:"files"`
	Notes       []string        `json:"notes"`
	Error       string          `json:"error,omitempty"`
	ExpiresAt   string          `json:"expires_at,omitempty"`
}

// runIDSchema is the id argument of the run tools.
func runIDSchema() *jsonschema.Schema {
	s := str("The run's id, as execute_code and list_runs return it.")
	s.Pattern = "^[0-9a-f]{16}$"
	return s
}

// stateSchema is a run's state, one of runs.States.
func stateSchema(description string) *jsonschema.Schema {
	s := str(description)
	for _, st := range runs.States {
		s.Enum = append(s.Enum, string(st))
	}
	return s
}

func runStatusSchema() *jsonschema.Schema {
	return object(props{
		"id":            str(""),
		"state":         stateSchema(""),
		"background":    boolean("Started with background: true (or kept running after its call ended)."),
		"created":       str("When it was asked for (RFC 3339, UTC)."),
		"started":       str("When the code started (absent while queued)."),
		"ended":         str("When it ended (absent while in flight)."),
		"queued_ms":     integer(""),
		"duration_ms":   integer("How long the code ran (so far, while running)."),
		"exit_code":     integer("Exit status, once the code has ended."),
		"timed_out":     boolean(""),
		"out_of_memory": boolean(""),
		"truncated":     boolean(""),
		"stdout_bytes":  integer(""),
		"stderr_bytes":  integer(""),
		"stdout_tail":   str("The last lines of stdout."),
		"stderr_tail":   str("The last lines of stderr."),
		"network":       arrayOf(netEntrySchema(), "Requests the run made through the proxy (known once it ends)."),
		"files":         arrayOf(fileOutputSchema(), ""),
		"notes":         arrayOf(str(""), ""),
		"error":         str("Why the run has no result of its own (cancelled, interrupted, could not start)."),
		"expires_at":    str("When this ended run will be removed at the latest."),
	}, "id", "state", "background", "created", "queued_ms", "duration_ms", "timed_out", "out_of_memory", "truncated",
		"stdout_bytes", "stderr_bytes", "stdout_tail", "stderr_tail", "network", "files", "notes")
}

// fileOutputSchema is one file a run left in out/.
func fileOutputSchema() *jsonschema.Schema {
	return object(props{
		"name":      str("File name in out/."),
		"mime_type": str(""),
		"size":      integer("Bytes."),
		"uri":       str("run://{id}/files/{name}: read it with resources/read."),
		"inline":    boolean("The result carries it as image content."),
	}, "name", "mime_type", "size", "uri", "inline")
}

// statusOutput builds run_status's answer for rec, with the tails of its
// output.
func (s *Server) statusOutput(rec *runs.Record) runStatusOutput {
	out := runStatusOutput{
		ID:          rec.ID,
		State:       string(rec.State),
		Background:  rec.Background,
		Created:     rfc3339(rec.Created),
		Started:     rfc3339(rec.Started),
		Ended:       rfc3339(rec.Ended),
		QueuedMS:    rec.QueuedMS,
		DurationMS:  rec.DurationMS,
		TimedOut:    rec.TimedOut,
		OutOfMemory: rec.OutOfMemory,
		Truncated:   rec.Truncated,
		StdoutBytes: rec.StdoutBytes,
		StderrBytes: rec.StderrBytes,
		Network:     rec.Network,
		Files:       []fileOutput{},
		Notes:       rec.Notes,
		Error:       rec.Error,
		ExpiresAt:   rfc3339(s.runMgr.ExpiresAt(rec)),
	}
	if rec.State == runs.Running && !rec.Started.IsZero() {
		out.DurationMS = time.Since(rec.Started).Milliseconds()
	}
	if rec.State.Final() && rec.Error == "" {
		code := rec.ExitCode
		out.ExitCode = &code
	}
	if out.Network == nil {
		out.Network = []gate.NetEntry{}
	}
	if out.Notes == nil {
		out.Notes = []string{}
	}
	for _, f := range rec.Files {
		out.Files = append(out.Files, fileOutput{Name: f.Name, MIMEType: f.MIMEType, Size: f.Size, URI: runFileURI(rec.ID, f.Name),
			Inline: runs.IsInlineImage(f.MIMEType) && f.Size <= s.opts.InlineImageBytes})
	}
	if b, _, err := s.runMgr.Output(rec.ID, "stdout"); err == nil {
		out.StdoutTail = tail(b)
	}
	if b, _, err := s.runMgr.Output(rec.ID, "stderr"); err == nil {
		out.StderrTail = tail(b)
	}
	return out
}

// statusResult is the tool result of run_status and cancel_run: a short
// summary and the status as structuredContent.
func (s *Server) statusResult(rec *runs.Record, lead string) *mcp.CallToolResult {
	st := s.statusOutput(rec)
	var b strings.Builder
	if lead != "" {
		b.WriteString(lead + "\n")
	}
	fmt.Fprintf(&b, "run %s: %s", st.ID, st.State)
	switch {
	case st.Ended != "":
		fmt.Fprintf(&b, ", ended %s", st.Ended)
		if st.ExitCode != nil {
			fmt.Fprintf(&b, ", exit code %d", *st.ExitCode)
		}
	case st.Started != "":
		fmt.Fprintf(&b, " for %ss", formatSeconds(math.Round(float64(st.DurationMS)/100)/10))
	}
	fmt.Fprintf(&b, "; stdout %d bytes, stderr %d bytes", st.StdoutBytes, st.StderrBytes)
	if len(st.Files) > 0 {
		fmt.Fprintf(&b, "; %d files", len(st.Files))
	}
	if st.ExpiresAt != "" {
		fmt.Fprintf(&b, "; kept until %s", st.ExpiresAt)
	}
	if st.Error != "" {
		b.WriteString("\n" + st.Error)
	}
	if st.StdoutTail != "" {
		b.WriteString("\nlast lines of stdout:\n" + st.StdoutTail)
	}
	if st.StderrTail != "" {
		b.WriteString("\nlast lines of stderr:\n" + st.StderrTail)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}, StructuredContent: st}
}

// tail returns the last tailLines lines of b, at most tailBytes, cut on a
// rune boundary.
func tail(b []byte) string {
	if len(b) > tailBytes {
		b = b[len(b)-tailBytes:]
		for len(b) > 0 && !utf8.RuneStart(b[0]) {
			b = b[1:]
		}
	}
	body := bytes.TrimSuffix(b, []byte("\n"))
	n := 0
	for i := len(body) - 1; i >= 0; i-- {
		if body[i] == '\n' {
			n++
			if n == tailLines {
				return string(b[i+1:])
			}
		}
	}
	return string(b)
}

func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func (s *Server) runStatus(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	fields, err := objectFields(req.Params.Arguments, "id")
	if err != nil {
		return toolError("run_status: %v", err), nil
	}
	id, err := runIDArg(fields)
	if err != nil {
		return toolError("run_status: %v", err), nil
	}
	rec, err := s.runMgr.Get(id)
	if err != nil {
		return toolError("run_status: %v", err), nil
	}
	return s.statusResult(rec, ""), nil
}

func (s *Server) runWait(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	arrived := time.Now()
	fields, err := objectFields(req.Params.Arguments, "id", "timeout")
	if err != nil {
		return toolError("run_wait: %v", err), nil
	}
	id, err := runIDArg(fields)
	if err != nil {
		return toolError("run_wait: %v", err), nil
	}
	wait := defaultWait
	if raw, ok := fields["timeout"]; ok && !strictjson.IsNull(raw) {
		if wait, err = parseSeconds(raw, "timeout", defaultWait, s.opts.MaxWait); err != nil {
			return toolError("run_wait: %v", err), nil
		}
	}
	if _, err := s.runMgr.Get(id); err != nil {
		return toolError("run_wait: %v", err), nil
	}
	if run := s.runMgr.Live(id); run != nil {
		prog := s.startProgress(ctx, req, arrived, runProgress(run))
		timer := time.NewTimer(wait)
		select {
		case <-run.Done():
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
		prog.stop()
		select {
		case <-run.Done():
			rec, stdout, stderr, files := run.Final()
			return s.finalResult(rec, stdout, stderr, files), nil
		default:
		}
		if ctx.Err() != nil {
			return toolError("run_wait: the call was cancelled; run %s goes on", id), nil
		}
		rec, err := s.runMgr.Get(id)
		if err != nil {
			return toolError("run_wait: %v", err), nil
		}
		return s.statusResult(rec, fmt.Sprintf("run %s is still %s after %ss: call run_wait again, or cancel_run to stop it.",
			id, rec.State, formatSeconds(wait.Seconds()))), nil
	}
	return s.storedResult(id, "run_wait")
}

// storedResult is the final result of an ended run, read from the store.
func (s *Server) storedResult(id, tool string) (*mcp.CallToolResult, error) {
	rec, err := s.runMgr.Get(id)
	if err != nil {
		return toolError("%s: %v", tool, err), nil
	}
	stdout, _, err := s.runMgr.Output(id, "stdout")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	stderr, _, err := s.runMgr.Output(id, "stderr")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", tool, err)
	}
	files := map[string][]byte{}
	for _, f := range rec.Files {
		if runs.IsInlineImage(f.MIMEType) && f.Size <= s.opts.InlineImageBytes {
			data, _, err := s.runMgr.File(id, f.Name)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", tool, err)
			}
			files[f.Name] = data
		}
	}
	return s.finalResult(rec, stdout, stderr, files), nil
}

// parseSeconds reads a number of seconds in (0, max].
func parseSeconds(raw json.RawMessage, name string, def, max time.Duration) (time.Duration, error) {
	var sec float64
	if raw[0] == '"' || raw[0] == '[' || raw[0] == '{' || raw[0] == 't' || raw[0] == 'f' || json.Unmarshal(raw, &sec) != nil ||
		math.IsNaN(sec) || math.IsInf(sec, 0) {
		return 0, fmt.Errorf("%s must be a number of seconds (e.g. 30), got %s", name, strictjson.Kind(raw, strictjson.ShortValue))
	}
	switch {
	case sec <= 0:
		return 0, fmt.Errorf("%s must be more than 0 seconds, got %s; leave it out for the default of %ss",
			name, formatSeconds(sec), formatSeconds(def.Seconds()))
	case sec > max.Seconds():
		return 0, fmt.Errorf("%s %ss is over the maximum of %ss: ask for %s or less, and call again if the run is still going",
			name, formatSeconds(sec), formatSeconds(max.Seconds()), formatSeconds(max.Seconds()))
	}
	return time.Duration(sec * float64(time.Second)), nil
}

// runOutputOutput is run_output's structuredContent.
type runOutputOutput struct {
	ID         string `json:"id"`
	Stream     string `json:"stream"`
	Offset     int64  `json:"offset"`
	NextOffset int64  `json:"next_offset"`
	TotalBytes int64  `json:"total_bytes"`
	EOF        bool   `json:"eof"`
	Final      bool   `json:"final"`
	State      string `json:"state"`
}

func runOutputSchema() *jsonschema.Schema {
	return object(props{
		"id":          str(""),
		"stream":      str(""),
		"offset":      integer("Where this page starts (moved forward to a character boundary if needed)."),
		"next_offset": integer("Pass as offset for the next page."),
		"total_bytes": integer("Bytes of the stream kept so far."),
		"eof":         boolean("This page reaches the end of what is kept so far."),
		"final":       boolean("The run has ended: the stream will not grow."),
		"state":       str(""),
	}, "id", "stream", "offset", "next_offset", "total_bytes", "eof", "final", "state")
}

func (s *Server) runOutput(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	fields, err := objectFields(req.Params.Arguments, "id", "stream", "offset", "limit")
	if err != nil {
		return toolError("run_output: %v", err), nil
	}
	id, err := runIDArg(fields)
	if err != nil {
		return toolError("run_output: %v", err), nil
	}
	stream, given, err := stringArg(fields, "stream")
	if err != nil {
		return toolError("run_output: %v", err), nil
	}
	if !given {
		stream = "stdout"
	}
	if stream != "stdout" && stream != "stderr" {
		return toolError("run_output: stream %q: want \"stdout\" or \"stderr\"", truncate(stream, 40)), nil
	}
	offset, err := intArg(fields, "offset", 0, 0, math.MaxInt64/2)
	if err != nil {
		return toolError("run_output: %v", err), nil
	}
	limit, err := intArg(fields, "limit", defaultOutputLimit, 1, maxOutputLimit)
	if err != nil {
		return toolError("run_output: %v", err), nil
	}
	data, rec, err := s.runMgr.Output(id, stream)
	if err != nil {
		return toolError("run_output: %v", err), nil
	}
	total := int64(len(data))
	if offset > total {
		return toolError("run_output: offset %d is past the end of %s, which has %d bytes so far", offset, stream, total), nil
	}
	start := offset
	for start < total && !utf8.RuneStart(data[start]) {
		start++
	}
	end := min(start+limit, total)
	if end < total {
		// Do not cut a character in half: end before it.
		cut := end
		for cut > start && !utf8.RuneStart(data[cut]) {
			cut--
		}
		if cut > start {
			end = cut
		}
	}
	out := runOutputOutput{ID: id, Stream: stream, Offset: start, NextOffset: end, TotalBytes: total,
		EOF: end == total, Final: rec.State.Final(), State: string(rec.State)}
	text := string(data[start:end])
	if text == "" {
		text = fmt.Sprintf("(no %s bytes from offset %d; the run is %s)", stream, start, rec.State)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: out}, nil
}

func (s *Server) cancelRun(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	fields, err := objectFields(req.Params.Arguments, "id")
	if err != nil {
		return toolError("cancel_run: %v", err), nil
	}
	id, err := runIDArg(fields)
	if err != nil {
		return toolError("cancel_run: %v", err), nil
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	rec, stopped, err := s.runMgr.Cancel(wctx, id)
	if err != nil {
		return toolError("cancel_run: %v", err), nil
	}
	lead := fmt.Sprintf("run %s was stopped; its output so far is kept.", id)
	if !stopped {
		lead = fmt.Sprintf("run %s had already ended (%s); nothing changed.", id, rec.State)
	}
	return s.statusResult(rec, lead), nil
}

// listRunsOutput is list_runs' structuredContent.
type listRunsOutput struct {
	Runs       []runListEntry `json:"runs"`
	Total      int            `json:"total"`
	Offset     int            `json:"offset"`
	NextOffset *int           `json:"next_offset,omitempty"`
	Retention  string         `json:"retention"`
}

type runListEntry struct {
	ID          string `json:"id"`
	State       string `json:"state"`
	Background  bool   `json:"background"`
	Created     string `json:"created"`
	Ended       string `json:"ended,omitempty"`
	DurationMS  int64  `json:"duration_ms"`
	ExitCode    *int   `json:"exit_code,omitempty"`
	StdoutBytes int64  `json:"stdout_bytes"`
	StderrBytes int64  `json:"stderr_bytes"`
	Files       int    `json:"files"`
	ExpiresAt   string `json:"expires_at,omitempty"`
	KeptFor     string `json:"kept_for"`
}

func listRunsSchema() *jsonschema.Schema {
	run := object(props{
		"id":           str(""),
		"state":        str(""),
		"background":   boolean(""),
		"created":      str(""),
		"ended":        str(""),
		"duration_ms":  integer(""),
		"exit_code":    integer(""),
		"stdout_bytes": integer(""),
		"stderr_bytes": integer(""),
		"files":        integer(""),
		"expires_at":   str("When it will be removed at the latest."),
		"kept_for":     str("How long it is kept from now, in words."),
	}, "id", "state", "background", "created", "duration_ms", "stdout_bytes", "stderr_bytes", "files", "kept_for")
	return object(props{
		"runs":        arrayOf(run, ""),
		"total":       integer("Runs that match, on all pages."),
		"offset":      integer(""),
		"next_offset": integer("Pass as offset for the next page; absent on the last page."),
		"retention":   str("How long ended runs are kept, and the size cap."),
	}, "runs", "total", "offset", "retention")
}

func (s *Server) listRuns(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	fields, err := objectFields(req.Params.Arguments, "state", "offset", "limit")
	if err != nil {
		return toolError("list_runs: %v", err), nil
	}
	var state runs.State
	if name, given, err := stringArg(fields, "state"); err != nil {
		return toolError("list_runs: %v", err), nil
	} else if given {
		if state, err = runs.ParseState(name); err != nil {
			return toolError("list_runs: %v", err), nil
		}
	}
	offset, err := intArg(fields, "offset", 0, 0, math.MaxInt32)
	if err != nil {
		return toolError("list_runs: %v", err), nil
	}
	limit, err := intArg(fields, "limit", defaultListLimit, 1, maxListLimit)
	if err != nil {
		return toolError("list_runs: %v", err), nil
	}
	recs, err := s.runMgr.List(state)
	if err != nil {
		return nil, fmt.Errorf("list_runs: %w", err)
	}
	set := s.runMgr.Settings()
	out := listRunsOutput{Runs: []runListEntry{}, Total: len(recs), Offset: int(offset),
		Retention: fmt.Sprintf("ended runs are kept for %s; when all runs together hold more than %s, the oldest go first",
			runs.FormatDuration(set.Retention), runs.FormatBytes(set.MaxTotalBytes))}
	now := time.Now()
	var b strings.Builder
	fmt.Fprintf(&b, "%d runs", len(recs))
	if state != "" {
		fmt.Fprintf(&b, " %s", state)
	}
	b.WriteString(" (" + out.Retention + ")")
	for i := int(offset); i < len(recs) && i < int(offset+limit); i++ {
		rec := recs[i]
		e := runListEntry{ID: rec.ID, State: string(rec.State), Background: rec.Background, Created: rfc3339(rec.Created),
			Ended: rfc3339(rec.Ended), DurationMS: rec.DurationMS, StdoutBytes: rec.StdoutBytes, StderrBytes: rec.StderrBytes,
			Files: len(rec.Files), KeptFor: "while it runs, then " + runs.FormatDuration(set.Retention)}
		if rec.State.Final() && rec.Error == "" {
			code := rec.ExitCode
			e.ExitCode = &code
		}
		if exp := s.runMgr.ExpiresAt(rec); !exp.IsZero() {
			e.ExpiresAt = rfc3339(exp)
			e.KeptFor = runs.FormatDuration(exp.Sub(now).Round(time.Minute))
		}
		out.Runs = append(out.Runs, e)
		fmt.Fprintf(&b, "\n%s  %-11s created %s", e.ID, e.State, e.Created)
		if e.ExpiresAt != "" {
			fmt.Fprintf(&b, ", kept until %s", e.ExpiresAt)
		}
	}
	if next := int(offset) + len(out.Runs); next < len(recs) {
		out.NextOffset = &next
		fmt.Fprintf(&b, "\nmore: list_runs {offset: %d}", next)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}, StructuredContent: out}, nil
}

// runResource is the JSON of run://{id}.
type runResource struct {
	Status runStatusOutput `json:"status"`
	Stdout string          `json:"stdout"`
	Stderr string          `json:"stderr"`
}

func (s *Server) readRun(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, ok := strings.CutPrefix(uri, runScheme)
	if !ok || runs.CheckID(id) != nil {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	rec, err := s.runMgr.Get(id)
	if errors.Is(err, runs.ErrNotFound) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, err
	}
	stdout, _, err := s.runMgr.Output(id, "stdout")
	if err != nil {
		return nil, err
	}
	stderr, _, err := s.runMgr.Output(id, "stderr")
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(runResource{Status: s.statusOutput(rec), Stdout: string(stdout), Stderr: string(stderr)})
	if err != nil {
		return nil, err
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: "application/json", Text: string(b)}}}, nil
}

func (s *Server) readRunFile(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	rest, ok := strings.CutPrefix(uri, runScheme)
	id, name, ok2 := strings.Cut(rest, "/files/")
	if !ok || !ok2 || runs.CheckID(id) != nil || !runs.ValidFileName(name) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	data, f, err := s.runMgr.File(id, name)
	if errors.Is(err, runs.ErrNotFound) {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, err
	}
	c := &mcp.ResourceContents{URI: uri, MIMEType: f.MIMEType}
	if strings.HasPrefix(f.MIMEType, "text/") && utf8.Valid(data) {
		c.Text = string(data)
	} else {
		c.Blob = data
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{c}}, nil
}
