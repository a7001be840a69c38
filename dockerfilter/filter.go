// Package dockerfilter is the Docker socket filter: an HTTP server on a unix
// socket that stands between the CodeForge server and the real Docker
// Engine socket, and forwards only what running code in the sandbox needs.
//
// It allows exactly:
//
//   - GET and HEAD /_ping, GET /version (with or without a /v1.NN prefix);
//   - POST /containers/{sandbox}/exec, where {sandbox} names the sandbox
//     container, with a body it decodes strictly, validates, and then
//     replaces by one it builds itself (fixed wrapper command, fixed
//     non-root user, not privileged, no TTY, no working directory, only
//     the run's own CODEFORGE_* and proxy variables; or codeforge-run
//     --warm with the same checks and no timeout or proxy, which come
//     with the run on stdin and can only narrow what was checked here);
//   - POST /exec/{id}/start (attached, no TTY, upgraded to a raw stream)
//     and GET /exec/{id}/json, only for exec IDs this filter created.
//
// Everything else, and anything it cannot parse or check, is answered with
// 403 and a Docker-style {"message": …} body, and nothing reaches the
// engine (deny by default, fail closed). Paths are checked on the raw
// request URI: percent-encoding, "..", ".", "//", trailing slashes, query
// strings and method-override headers are all refused.
//
// Besides filtering, the filter heals its own compose project (Heal, run
// by the dockerfilter command): a container left in the network namespace
// of a container that has since restarted — the sandbox after a netguard
// crash — is restarted into the new one once that namespace is locked
// down. Clients cannot ask for this; it adds nothing to what they may do.
package dockerfilter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/moby/moby/client"

	"github.com/codeforge/codeforge/sandbox/runpolicy"
)

// Defaults for Options fields left zero.
const (
	DefaultDockerHost     = "unix:///var/run/docker.sock"
	DefaultSandboxService = "sandbox"
	DefaultRunUser        = "10001:10001"
	DefaultWrapper        = runpolicy.WrapperPath
	DefaultMaxExecs       = 10000
	DefaultExecTTL        = time.Hour
)

// maxBody caps every request body the filter reads (exec create and start
// bodies are a few hundred bytes).
const maxBody = 64 << 10

// maxResponse caps the engine's answer to an exec create that the filter
// reads to learn the new exec's ID.
const maxResponse = 64 << 10

// Options configures a Filter.
type Options struct {
	// DockerHost is the real engine, "unix:///path". Default
	// DefaultDockerHost.
	DockerHost string
	// SandboxService is the compose service name of the sandbox; it is also
	// the name clients use for the sandbox in exec create paths. Default
	// DefaultSandboxService.
	SandboxService string
	// SandboxContainer, if set, names the sandbox container (name or ID)
	// and turns compose discovery off. Otherwise the sandbox is the one
	// running container labelled with the filter's own compose project and
	// com.docker.compose.service=SandboxService.
	SandboxContainer string
	// RunUser is the user every exec runs as, "uid:gid" (numeric, not 0).
	// Default DefaultRunUser.
	RunUser string
	// Wrapper is the absolute path of codeforge-run in the sandbox image.
	// Default DefaultWrapper.
	Wrapper string
	// MaxExecs bounds how many created exec IDs are remembered; the oldest
	// is forgotten first. Default DefaultMaxExecs.
	MaxExecs int
	// ExecTTL is how long a created exec ID may be started or inspected.
	// Default DefaultExecTTL.
	ExecTTL time.Duration
	// Hostname is the filter's own container hostname for compose
	// discovery; empty means os.Hostname.
	Hostname string
	// Logger receives allow/deny lines; nil logs nothing.
	Logger *slog.Logger
}

// Filter is the socket filter's HTTP handler. It is safe for concurrent use.
type Filter struct {
	opts    Options
	log     *slog.Logger
	engine  *http.Transport
	docker  *client.Client
	sandbox *resolver
	execs   *execRegistry
}

var (
	runUserPattern = regexp.MustCompile(`^[0-9]{1,10}:[0-9]{1,10}$`)
	// versionPattern is a Docker API version path prefix, e.g. v1.41.
	versionPattern = regexp.MustCompile(`^v1\.[0-9]{1,3}$`)
	// execIDPattern is what the engine hands out as an exec ID.
	execIDPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)
	// rawPathPattern is every character an allowed path can hold. It keeps
	// out '%' (any percent-encoding), '?', '#', ';', '\\' and spaces.
	rawPathPattern = regexp.MustCompile(`^/[A-Za-z0-9._/-]*$`)
	// containerRefPattern is a container name or ID as a client may write it.
	containerRefPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)
)

// New checks opts and returns a Filter. It does not contact the engine:
// the sandbox container is resolved on every exec create, so a recreated
// sandbox is picked up without a restart.
func New(opts Options) (*Filter, error) {
	if opts.DockerHost == "" {
		opts.DockerHost = DefaultDockerHost
	}
	if opts.SandboxService == "" {
		opts.SandboxService = DefaultSandboxService
	}
	if opts.RunUser == "" {
		opts.RunUser = DefaultRunUser
	}
	if opts.Wrapper == "" {
		opts.Wrapper = DefaultWrapper
	}
	if opts.MaxExecs == 0 {
		opts.MaxExecs = DefaultMaxExecs
	}
	if opts.ExecTTL == 0 {
		opts.ExecTTL = DefaultExecTTL
	}
	socket, err := unixSocketPath(opts.DockerHost)
	if err != nil {
		return nil, err
	}
	if !containerRefPattern.MatchString(opts.SandboxService) {
		return nil, fmt.Errorf("sandbox service %q: want a compose service name (letters, digits, '_', '.', '-')", opts.SandboxService)
	}
	if opts.SandboxContainer != "" && !containerRefPattern.MatchString(opts.SandboxContainer) {
		return nil, fmt.Errorf("sandbox container %q: want a container name or ID", opts.SandboxContainer)
	}
	if !runUserPattern.MatchString(opts.RunUser) || strings.HasPrefix(opts.RunUser, "0:") || strings.HasSuffix(opts.RunUser, ":0") {
		return nil, fmt.Errorf("run user %q: want numeric uid:gid, neither of them 0 (root)", opts.RunUser)
	}
	if !strings.HasPrefix(opts.Wrapper, "/") || !rawPathPattern.MatchString(opts.Wrapper) || strings.Contains(opts.Wrapper, "..") {
		return nil, fmt.Errorf("wrapper %q: want an absolute path of plain characters", opts.Wrapper)
	}
	if opts.MaxExecs < 0 || opts.ExecTTL < 0 {
		return nil, errors.New("MaxExecs and ExecTTL must be positive (or zero for the defaults)")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "dockerfilter")

	engine := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		},
		MaxIdleConns:          16,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		DisableCompression:    true,
	}
	docker, err := client.New(client.WithHost(opts.DockerHost), client.WithHTTPClient(&http.Client{Transport: engine}))
	if err != nil {
		return nil, fmt.Errorf("docker client for %s: %w", opts.DockerHost, err)
	}
	f := &Filter{
		opts:   opts,
		log:    log,
		engine: engine,
		docker: docker,
		sandbox: &resolver{
			docker:   docker,
			service:  opts.SandboxService,
			explicit: opts.SandboxContainer,
			hostname: opts.Hostname,
		},
		execs: newExecRegistry(opts.MaxExecs, opts.ExecTTL, time.Now),
	}
	return f, nil
}

// Close releases idle connections to the engine.
func (f *Filter) Close() error {
	f.engine.CloseIdleConnections()
	return f.docker.Close()
}

// unixSocketPath returns the socket path of a unix:// Docker host.
func unixSocketPath(host string) (string, error) {
	p, ok := strings.CutPrefix(host, "unix://")
	if !ok || !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("docker host %q: want unix:///path/to/docker.sock", host)
	}
	return p, nil
}

// denial is a request the filter refuses: status (403 unless the engine or
// the sandbox is the problem) and a message for the client and the log.
type denial struct {
	status int
	msg    string
}

func (d *denial) Error() string { return d.msg }

func deny(format string, args ...any) *denial {
	return &denial{status: http.StatusForbidden, msg: fmt.Sprintf(format, args...)}
}

// methodOverrideHeaders are headers some servers honour to change the
// method; Docker does not, but a request carrying one is not from our
// client and is refused outright.
var methodOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override", "X-Original-Method"}

// ServeHTTP checks a request and forwards it, or answers 403.
func (f *Filter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, d := f.route(r)
	if d != nil {
		f.refuse(w, r, d)
		return
	}
	switch rt.kind {
	case routeExecCreate:
		f.execCreate(w, r, rt)
	case routeExecStart:
		f.execStart(w, r, rt)
	default:
		f.allow(r, rt)
		f.forward(w, r, rt.path, nil, nil)
	}
}

// allow logs a request that passed every check and is forwarded.
func (f *Filter) allow(r *http.Request, rt route) {
	f.log.Info("allow", "method", r.Method, "path", logPath(r), "route", rt.kind)
}

func (f *Filter) refuse(w http.ResponseWriter, r *http.Request, d *denial) {
	f.log.Warn("deny", "method", r.Method, "path", logPath(r), "status", d.status, "reason", d.msg)
	writeMessage(w, d.status, "dockerfilter: "+d.msg)
}

// logPath is the request path for logs: raw, without the query (which is
// refused anyway and could carry anything), and cut to a sane length.
func logPath(r *http.Request) string {
	p, _, _ := strings.Cut(r.RequestURI, "?")
	if len(p) > 200 {
		p = p[:200] + "…"
	}
	return p
}

// writeMessage answers with a Docker-style error body, which Docker
// clients show as the error text.
func writeMessage(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Message string `json:"message"`
	}{msg})
}

type routeKind string

const (
	routePing        routeKind = "ping"
	routeVersion     routeKind = "version"
	routeExecCreate  routeKind = "exec-create"
	routeExecStart   routeKind = "exec-start"
	routeExecInspect routeKind = "exec-inspect"
)

// route is an allowed request, with the upstream path it goes to.
type route struct {
	kind    routeKind
	version string // "v1.41" or ""
	target  string // {sandbox} or exec ID as the client wrote it
	path    string // upstream path
}

// route checks everything about a request that does not need its body or
// the engine, and says where it goes.
func (f *Filter) route(r *http.Request) (route, *denial) {
	raw := r.RequestURI
	if !rawPathPattern.MatchString(raw) {
		// Also catches absolute-form URIs, '*', queries and fragments.
		return route{}, deny("path %q refused: only plain paths are allowed (no percent-encoding, query string or special characters)", trimForMessage(raw))
	}
	if r.URL.RawQuery != "" || r.URL.ForceQuery || r.URL.Path != raw {
		return route{}, deny("path refused: query strings and encoded paths are not allowed")
	}
	if strings.Contains(raw, "//") || strings.HasSuffix(raw, "/") {
		return route{}, deny("path %q refused: empty path segments are not allowed", raw)
	}
	for _, h := range methodOverrideHeaders {
		if _, ok := r.Header[h]; ok {
			return route{}, deny("%s refused: method override headers are not allowed", h)
		}
	}
	segs := strings.Split(raw[1:], "/")
	for _, s := range segs {
		if s == "." || s == ".." {
			return route{}, deny("path %q refused: '.' and '..' segments are not allowed", raw)
		}
	}
	var rt route
	if versionPattern.MatchString(segs[0]) {
		rt.version, segs = segs[0], segs[1:]
	}
	prefix := ""
	if rt.version != "" {
		prefix = "/" + rt.version
	}
	method := r.Method
	switch {
	case len(segs) == 1 && segs[0] == "_ping" && (method == http.MethodGet || method == http.MethodHead):
		rt.kind, rt.path = routePing, prefix+"/_ping"
	case len(segs) == 1 && segs[0] == "version" && method == http.MethodGet:
		rt.kind, rt.path = routeVersion, prefix+"/version"
	case len(segs) == 3 && segs[0] == "containers" && segs[2] == "exec" && method == http.MethodPost:
		if !containerRefPattern.MatchString(segs[1]) {
			return route{}, deny("container %q refused: not a container name", segs[1])
		}
		rt.kind, rt.target = routeExecCreate, segs[1]
		rt.path = prefix + "/containers/%s/exec" // filled in once the sandbox is resolved
	case len(segs) == 3 && segs[0] == "exec" && segs[2] == "start" && method == http.MethodPost:
		rt.kind, rt.target, rt.path = routeExecStart, segs[1], prefix+"/exec/"+segs[1]+"/start"
	case len(segs) == 3 && segs[0] == "exec" && segs[2] == "json" && method == http.MethodGet:
		rt.kind, rt.target, rt.path = routeExecInspect, segs[1], prefix+"/exec/"+segs[1]+"/json"
	default:
		return route{}, deny("%s %s is not allowed: this socket only runs code in the sandbox (exec create/start/inspect, _ping, version)", method, raw)
	}
	if rt.kind != routeExecCreate && rt.kind != routeExecStart {
		if r.ContentLength != 0 {
			return route{}, deny("%s %s refused: a request body is not allowed here", method, raw)
		}
	}
	if rt.kind == routeExecStart || rt.kind == routeExecInspect {
		if !execIDPattern.MatchString(rt.target) {
			return route{}, deny("exec %q refused: not an exec ID", trimForMessage(rt.target))
		}
		if !f.execs.known(rt.target) {
			return route{}, deny("exec %s refused: it was not created through this filter (or has expired)", rt.target)
		}
	}
	return rt, nil
}

func trimForMessage(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// forward sends the request upstream to path with only the given headers
// and body (nil: none), so nothing the client added beyond what the filter
// checked reaches the engine. A 101 answer (exec start) is relayed as a
// raw two-way stream, half-closes included.
func (f *Filter) forward(w http.ResponseWriter, r *http.Request, path string, body []byte, header http.Header) {
	rp := &httputil.ReverseProxy{
		Transport:    f.engine,
		ErrorHandler: f.upstreamError,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL = &url.URL{Scheme: "http", Host: "docker", Path: path}
			pr.Out.Host = "docker"
			pr.Out.Header = header.Clone()
			if pr.Out.Header == nil {
				pr.Out.Header = http.Header{}
			}
			if body != nil {
				pr.Out.Body = io.NopCloser(bytes.NewReader(body))
				pr.Out.ContentLength = int64(len(body))
			} else {
				pr.Out.Body = http.NoBody
				pr.Out.ContentLength = 0
			}
			pr.Out.GetBody = nil
			pr.Out.TransferEncoding = nil
		},
	}
	rp.ServeHTTP(w, r)
}

func (f *Filter) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	f.log.Warn("upstream error", "method", r.Method, "path", logPath(r), "err", err)
	writeMessage(w, http.StatusBadGateway, "dockerfilter: docker engine: "+err.Error())
}
