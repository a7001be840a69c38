package dockerfilter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// WrapperName is the one command an exec may ask for; the filter replaces
// it by the wrapper's absolute path.
const WrapperName = "codeforge-run"

// Exec create body keys: exactly what github.com/moby/moby/client's
// ExecCreate sends (container.ExecCreateRequest). Any other key, a key in
// another case, or a key twice is refused.
var execCreateKeys = []string{
	"User", "Privileged", "Tty", "ConsoleSize", "AttachStdin", "AttachStderr",
	"AttachStdout", "DetachKeys", "Env", "WorkingDir", "Cmd",
}

// Exec start body keys (container.ExecStartRequest).
var execStartKeys = []string{"Detach", "Tty", "ConsoleSize"}

// Patterns the values of the run's environment must match; each keeps out
// the characters that could smuggle a second value, a flag or a path
// component into the wrapper's deno command line. codeforge-run checks
// the same again.
var (
	hostItem   = `(?:[A-Za-z0-9][A-Za-z0-9._-]*(?::[0-9]{1,5})?|\[[0-9A-Fa-f:.]{2,45}\](?::[0-9]{1,5})?)`
	pathItem   = `/[A-Za-z0-9._@+/-]*`
	envPattern = map[string]*regexp.Regexp{
		"CODEFORGE_RUN_ID":    regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`),
		"CODEFORGE_TIMEOUT":   regexp.MustCompile(`^[0-9]{1,5}(\.[0-9]{1,3})?$`),
		"CODEFORGE_ALLOW_NET": regexp.MustCompile(`^(\*|` + hostItem + `(,` + hostItem + `)*)?$`),
		"CODEFORGE_MEMORY_MB": regexp.MustCompile(`^[1-9][0-9]{0,5}$`),
		"CODEFORGE_READ":      regexp.MustCompile(`^(` + pathItem + `(,` + pathItem + `)*)?$`),
		"CODEFORGE_KEEP_OUT":  regexp.MustCompile(`^1?$`),
		"HTTPS_PROXY":         regexp.MustCompile(`^https?://([A-Za-z0-9._~-]{1,128}(:[A-Za-z0-9._~-]{0,256})?@)?[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?/?$`),
		"HTTP_PROXY":          regexp.MustCompile(`^https?://([A-Za-z0-9._~-]{1,128}(:[A-Za-z0-9._~-]{0,256})?@)?[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?/?$`),
	}
	// envOrder is the order the rebuilt body lists the variables in.
	envOrder = []string{
		"CODEFORGE_RUN_ID", "CODEFORGE_TIMEOUT", "CODEFORGE_ALLOW_NET",
		"CODEFORGE_MEMORY_MB", "CODEFORGE_READ", "CODEFORGE_KEEP_OUT", "HTTPS_PROXY", "HTTP_PROXY",
	}
	runIDPattern = envPattern["CODEFORGE_RUN_ID"]
)

// maxTimeoutSeconds bounds CODEFORGE_TIMEOUT (one day).
const maxTimeoutSeconds = 86400

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
	resp, err := f.rt.RoundTrip(up)
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
	if raw, ok := fields["ConsoleSize"]; ok && !isNull(raw) {
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
	if raw, ok := fields["ConsoleSize"]; ok && !isNull(raw) {
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
	case len(cmd) == 3 && cmd[0] == WrapperName && cmd[1] == "--kill" && runIDPattern.MatchString(cmd[2]):
		if len(env) > 0 {
			return nil, deny("exec create refused: %s --kill takes no Env", WrapperName)
		}
		out.Cmd = []string{f.opts.Wrapper, "--kill", cmd[2]}
	case len(cmd) == 3 && cmd[0] == WrapperName && cmd[1] == "--collect" && runIDPattern.MatchString(cmd[2]):
		if len(env) > 0 {
			return nil, deny("exec create refused: %s --collect takes no Env", WrapperName)
		}
		out.Cmd = []string{f.opts.Wrapper, "--collect", cmd[2]}
	default:
		return nil, deny("exec create refused: Cmd must be [%q], [%q, \"--check\"], [%q, \"--check\", IPV4:PORT], [%q, \"--kill\", RUN_ID] or [%q, \"--collect\", RUN_ID]",
			WrapperName, WrapperName, WrapperName, WrapperName, WrapperName)
	}
	return out, nil
}

// CheckRunEnv reports why the filter would refuse env as a run's exec
// environment (the same words it answers 403 with), or nil when it would
// accept it. The runner calls it to fail early with a clear error.
func CheckRunEnv(env []string) error {
	if _, d := checkRunEnv(env); d != nil {
		return errors.New(strings.TrimPrefix(d.msg, "exec create refused: "))
	}
	return nil
}

// checkRunEnv checks a run's environment: each entry KEY=VALUE, each key
// known and at most once, each value matching its pattern; the run ID and
// timeout are required. Values are never echoed: the proxy URLs hold the
// run's proxy credential.
func checkRunEnv(env []string) ([]string, *denial) {
	vals := map[string]string{}
	for i, e := range env {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			return nil, deny("exec create refused: Env entry %d is not KEY=VALUE", i)
		}
		pat, known := envPattern[k]
		if !known {
			return nil, deny("exec create refused: Env key %q is not allowed (allowed: %s)", trimForMessage(k), strings.Join(envOrder, ", "))
		}
		if _, dup := vals[k]; dup {
			return nil, deny("exec create refused: Env key %s is given twice", k)
		}
		if !pat.MatchString(v) {
			return nil, deny("exec create refused: the value of Env key %s has characters or a form that is not allowed", k)
		}
		vals[k] = v
	}
	for _, k := range []string{"CODEFORGE_RUN_ID", "CODEFORGE_TIMEOUT"} {
		if _, ok := vals[k]; !ok {
			return nil, deny("exec create refused: Env must set %s", k)
		}
	}
	if t, err := strconv.ParseFloat(vals["CODEFORGE_TIMEOUT"], 64); err != nil || t <= 0 || t > maxTimeoutSeconds {
		return nil, deny("exec create refused: CODEFORGE_TIMEOUT must be a number of seconds above 0 and at most %d", maxTimeoutSeconds)
	}
	if r, ok := vals["CODEFORGE_READ"]; ok {
		for _, p := range strings.Split(r, ",") {
			if p != "" && slices.Contains(strings.Split(p, "/"), "..") {
				return nil, deny("exec create refused: CODEFORGE_READ paths must not contain '..'")
			}
		}
	}
	var out []string
	for _, k := range envOrder {
		if v, ok := vals[k]; ok {
			out = append(out, k+"="+v)
		}
	}
	return out, nil
}

// decodeObject decodes a JSON object whose keys must be among allowed,
// exactly as written there (encoding/json would match keys in any case)
// and at most once each. Trailing data is refused.
func decodeObject(body []byte, allowed []string) (map[string]json.RawMessage, *denial) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, deny("request body refused: not a JSON object")
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, deny("request body refused: invalid JSON: %v", err)
		}
		key, _ := tok.(string)
		if !slices.Contains(allowed, key) {
			return nil, deny("request body refused: unknown field %q (allowed: %s)", trimForMessage(key), strings.Join(allowed, ", "))
		}
		if _, dup := fields[key]; dup {
			return nil, deny("request body refused: field %q given twice", key)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, deny("request body refused: invalid JSON value for %q: %v", key, err)
		}
		fields[key] = raw
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, deny("request body refused: invalid JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, deny("request body refused: data after the JSON object")
	}
	return fields, nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

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
	if isNull(raw) || json.Unmarshal(raw, &s) != nil {
		return "", deny("request body refused: %s must be a string", key)
	}
	return s, nil
}

// decodeStrings accepts null (or a missing field) or an array of strings.
func decodeStrings(key string, raw json.RawMessage) ([]string, *denial) {
	if raw == nil || isNull(raw) {
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
