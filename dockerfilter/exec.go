package dockerfilter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/codeforge/codeforge/internal/strictjson"
	"github.com/codeforge/codeforge/sandbox/runpolicy"
)

// WrapperName is the one command an exec may ask for; the filter replaces
// it by the wrapper's absolute path.
const WrapperName = runpolicy.WrapperName

// Exec create body keys: exactly what github.com/moby/moby/client's
// ExecCreate sends (container.ExecCreateRequest). Any other key, a key in
// another case, or a key twice is refused.
var execCreateKeys = []string{
	"User", "Privileged", "Tty", "ConsoleSize", "AttachStdin", "AttachStderr",
	"AttachStdout", "DetachKeys", "Env", "WorkingDir", "Cmd",
}

// Exec start body keys (container.ExecStartRequest).
var execStartKeys = []string{"Detach", "Tty", "ConsoleSize"}

// execCreateRequest is the body the filter sends to the engine: always
// every field, so no default of the engine's decides anything.
type execCreateRequest struct {
	User         string
	Privileged   bool
	Tty          bool
	AttachStdin  bool
	AttachStderr bool
	AttachStdout bool
	DetachKeys   string
	Env          []string
	WorkingDir   string
	Cmd          []string
}

// execCreate validates an exec create, rebuilds its body, creates the exec
// on the sandbox container and remembers its ID.
func (f *Filter) execCreate(w http.ResponseWriter, r *http.Request, rt route) {
	body, d := readJSONBody(w, r)
	if d != nil {
		f.refuse(w, r, d)
		return
	}
	req, d := f.buildExecCreate(body)
	if d != nil {
		f.refuse(w, r, d)
		return
	}
	sb, err := f.sandbox.resolve(r.Context())
	if err != nil {
		f.refuse(w, r, &denial{status: http.StatusServiceUnavailable, msg: "sandbox unavailable: " + err.Error()})
		return
	}
	if rt.target != f.opts.SandboxService && rt.target != f.opts.SandboxContainer && rt.target != sb.id && rt.target != sb.name {
		f.refuse(w, r, deny("container %q is not the sandbox: exec is allowed on the sandbox container only", rt.target))
		return
	}
	f.allow(r, rt)
	out, err := json.Marshal(req)
	if err != nil {
		f.refuse(w, r, &denial{status: http.StatusInternalServerError, msg: "encode exec body: " + err.Error()})
		return
	}
	path := fmt.Sprintf(rt.path, sb.id)
	up, err := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://docker"+path, bytes.NewReader(out))
	if err != nil {
		f.refuse(w, r, &denial{status: http.StatusInternalServerError, msg: "build request: " + err.Error()})
		return
	}
	up.Header.Set("Content-Type", "application/json")
	resp, err := f.engine.RoundTrip(up)
	if err != nil {
		f.upstreamError(w, r, err)
		return
	}
	defer resp.Body.Close()
	respBody, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))
	if err != nil || len(respBody) > maxResponse {
		f.upstreamError(w, r, fmt.Errorf("read exec create answer: %v (or longer than %d bytes)", err, maxResponse))
		return
	}
	if resp.StatusCode == http.StatusCreated {
		var created struct{ Id string }
		if err := json.Unmarshal(respBody, &created); err != nil || !execIDPattern.MatchString(created.Id) {
			// The exec exists but was never started; without its ID no
			// one can start it through this filter.
			f.upstreamError(w, r, fmt.Errorf("exec create answer has no exec ID: %s", trimForMessage(string(respBody))))
			return
		}
		f.execs.add(created.Id)
		f.log.Info("exec created", "exec", created.Id, "container", sb.id, "cmd", strings.Join(req.Cmd, " "))
	}
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(respBody)
}

// execStart checks an exec start (attached, no TTY, upgraded) of an exec
// the filter created and not yet started, and relays its stream.
func (f *Filter) execStart(w http.ResponseWriter, r *http.Request, rt route) {
	if !headerHasToken(r.Header["Connection"], "upgrade") || !strings.EqualFold(r.Header.Get("Upgrade"), "tcp") {
		f.refuse(w, r, deny("exec start refused: only an attached start (Connection: Upgrade, Upgrade: tcp) is allowed"))
		return
	}
	body, d := readJSONBody(w, r)
	if d != nil {
		f.refuse(w, r, d)
		return
	}
	fields, d := decodeObject(body, execStartKeys)
	if d != nil {
		f.refuse(w, r, d)
		return
	}
	for _, k := range []string{"Detach", "Tty"} {
		if raw, ok := fields[k]; ok {
			v, d := decodeBool(k, raw)
			if d != nil {
				f.refuse(w, r, d)
				return
			}
			if v {
				f.refuse(w, r, deny("exec start refused: %s must be false", k))
				return
			}
		}
	}
	if raw, ok := fields["ConsoleSize"]; ok && !strictjson.IsNull(raw) {
		f.refuse(w, r, deny("exec start refused: ConsoleSize is only for TTYs, which are not allowed"))
		return
	}
	if !f.execs.start(rt.target) {
		f.refuse(w, r, deny("exec %s refused: already started (each exec starts once)", rt.target))
		return
	}
	f.allow(r, rt)
	f.forward(w, r, rt.path, []byte(`{"Detach":false,"Tty":false}`), http.Header{
		"Content-Type": {"application/json"},
		"Connection":   {"Upgrade"},
		"Upgrade":      {"tcp"},
	})
}

// readJSONBody reads a JSON request body of at most maxBody bytes.
func readJSONBody(w http.ResponseWriter, r *http.Request) ([]byte, *denial) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, deny("%s %s refused: Content-Type must be application/json", r.Method, r.URL.Path)
	}
	if r.ContentLength > maxBody {
		return nil, deny("request body of %d bytes refused: the limit is %d", r.ContentLength, maxBody)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, deny("request body refused: larger than the limit of %d bytes", maxBody)
		}
		return nil, deny("request body unreadable: %v", err)
	}
	return body, nil
}

// buildExecCreate decodes a client's exec create body strictly, checks it
// against the contract, and returns the body the filter will send instead.
func (f *Filter) buildExecCreate(body []byte) (*execCreateRequest, *denial) {
	fields, d := decodeObject(body, execCreateKeys)
	if d != nil {
		return nil, d
	}
	out := &execCreateRequest{User: f.opts.RunUser}
	for _, k := range []string{"Privileged", "Tty"} {
		if raw, ok := fields[k]; ok {
			v, d := decodeBool(k, raw)
			if d != nil {
				return nil, d
			}
			if v {
				return nil, deny("exec create refused: %s must be false", k)
			}
		}
	}
	for _, k := range []string{"AttachStdin", "AttachStdout", "AttachStderr"} {
		if raw, ok := fields[k]; ok {
			v, d := decodeBool(k, raw)
			if d != nil {
				return nil, d
			}
			switch k {
			case "AttachStdin":
				out.AttachStdin = v
			case "AttachStdout":
				out.AttachStdout = v
			case "AttachStderr":
				out.AttachStderr = v
			}
		}
	}
	for _, k := range []string{"User", "DetachKeys", "WorkingDir"} {
		raw, ok := fields[k]
		if !ok {
			continue
		}
		v, d := decodeString(k, raw)
		if d != nil {
			return nil, d
		}
		switch {
		case k == "User" && v != "" && v != f.opts.RunUser:
			return nil, deny("exec create refused: User must be empty or %q (every run uses the fixed sandbox user)", f.opts.RunUser)
		case k != "User" && v != "":
			return nil, deny("exec create refused: %s must be empty", k)
		}
	}
	if raw, ok := fields["ConsoleSize"]; ok && !strictjson.IsNull(raw) {
		return nil, deny("exec create refused: ConsoleSize is only for TTYs, which are not allowed")
	}
	cmd, d := decodeStrings("Cmd", fields["Cmd"])
	if d != nil {
		return nil, d
	}
	env, d := decodeStrings("Env", fields["Env"])
	if d != nil {
		return nil, d
	}
	switch {
	case slices.Equal(cmd, []string{WrapperName}):
		if out.Env, d = checkRunEnv(env); d != nil {
			return nil, d
		}
		out.Cmd = []string{f.opts.Wrapper}
	case slices.Equal(cmd, []string{WrapperName, "--warm"}):
		// A warm exec: deno started for these settings, waiting for its
		// run on stdin. The run can only narrow what is checked here.
		run, err := runpolicy.ParseWarmEnv(env)
		if err != nil {
			return nil, deny("exec create refused: %v", err)
		}
		if out.Env, err = run.WarmEnv(); err != nil {
			return nil, deny("exec create refused: %v", err)
		}
		out.Cmd = []string{f.opts.Wrapper, "--warm"}
	case slices.Equal(cmd, []string{WrapperName, "--check"}):
		if len(env) > 0 {
			return nil, deny("exec create refused: %s --check takes no Env", WrapperName)
		}
		out.Cmd = []string{f.opts.Wrapper, "--check"}
	case checkWithProbe(cmd):
		if len(env) > 0 {
			return nil, deny("exec create refused: %s --check takes no Env", WrapperName)
		}
		out.Cmd = []string{f.opts.Wrapper, "--check", cmd[2]}
	case len(cmd) == 3 && cmd[0] == WrapperName && cmd[1] == "--kill" && runpolicy.CheckRunID(cmd[2]) == nil:
		if len(env) > 0 {
			return nil, deny("exec create refused: %s --kill takes no Env", WrapperName)
		}
		out.Cmd = []string{f.opts.Wrapper, "--kill", cmd[2]}
	case len(cmd) == 3 && cmd[0] == WrapperName && cmd[1] == "--collect" && runpolicy.CheckRunID(cmd[2]) == nil:
		if len(env) > 0 {
			return nil, deny("exec create refused: %s --collect takes no Env", WrapperName)
		}
		out.Cmd = []string{f.opts.Wrapper, "--collect", cmd[2]}
	default:
		return nil, deny("exec create refused: Cmd must be [%q], [%q, \"--warm\"], [%q, \"--check\"], [%q, \"--check\", IPV4:PORT], [%q, \"--kill\", RUN_ID] or [%q, \"--collect\", RUN_ID]",
			WrapperName, WrapperName, WrapperName, WrapperName, WrapperName, WrapperName)
	}
	return out, nil
}

// checkRunEnv checks a run's environment against the wrapper's contract
// (runpolicy.ParseEnv: each key known and at most once, each value of
// its exact form, run ID and timeout required) and returns it rebuilt in
// canonical form. Values are never echoed: the proxy URLs hold the run's
// proxy credential.
func checkRunEnv(env []string) ([]string, *denial) {
	run, err := runpolicy.ParseEnv(env)
	if err != nil {
		return nil, deny("exec create refused: %v", err)
	}
	out, err := run.Env()
	if err != nil {
		return nil, deny("exec create refused: %v", err)
	}
	return out, nil
}

// decodeObject decodes a JSON object whose keys must be among allowed,
// exactly as written there (encoding/json would match keys in any case)
// and at most once each. Trailing data is refused (internal/strictjson).
func decodeObject(body []byte, allowed []string) (map[string]json.RawMessage, *denial) {
	fields, err := strictjson.Object(body, allowed)
	var unknown *strictjson.UnknownFieldError
	var dup *strictjson.DuplicateFieldError
	var syntax *strictjson.SyntaxError
	switch {
	case err == nil:
		return fields, nil
	case errors.As(err, &unknown):
		return nil, deny("request body refused: unknown field %q (allowed: %s)", trimForMessage(unknown.Field), strings.Join(allowed, ", "))
	case errors.As(err, &dup):
		return nil, deny("request body refused: field %q given twice", dup.Field)
	case errors.As(err, &syntax):
		return nil, deny("request body refused: %v", syntax)
	case errors.Is(err, strictjson.ErrTrailing):
		return nil, deny("request body refused: data after the JSON object")
	default:
		return nil, deny("request body refused: not a JSON object")
	}
}

// decodeBool accepts only the JSON literals true and false.
func decodeBool(key string, raw json.RawMessage) (bool, *denial) {
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, deny("request body refused: %s must be true or false", key)
}

// decodeString accepts a JSON string (null is refused).
func decodeString(key string, raw json.RawMessage) (string, *denial) {
	var s string
	if strictjson.IsNull(raw) || json.Unmarshal(raw, &s) != nil {
		return "", deny("request body refused: %s must be a string", key)
	}
	return s, nil
}

// decodeStrings accepts null (or a missing field) or an array of strings.
func decodeStrings(key string, raw json.RawMessage) ([]string, *denial) {
	if raw == nil || strictjson.IsNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, deny("request body refused: %s must be an array of strings", key)
	}
	out := make([]string, 0, len(items))
	for _, it := range items {
		s, d := decodeString(key, it)
		if d != nil {
			return nil, deny("request body refused: %s must be an array of strings", key)
		}
		out = append(out, s)
	}
	return out, nil
}

// headerHasToken reports whether a comma-separated header lists token
// (case-insensitive).
func headerHasToken(values []string, token string) bool {
	for _, v := range values {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}
