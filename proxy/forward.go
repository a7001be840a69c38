package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// errorHeader marks responses the proxy made up itself, naming why.
	errorHeader = "X-Codeforge-Proxy-Error"
	// smallBody is the largest request body (by Content-Length) that is
	// rewritten in one piece so it can keep an exact Content-Length; larger
	// or unknown-length bodies stream out chunked.
	smallBody = 64 << 10
	// debugBody is how much of each payload DEBUG_MODE logs.
	debugBody = 4 << 10
)

// hopHeaders are per-connection headers that never travel on.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authorization",
	"Proxy-Authenticate", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// target is where a request goes, fixed by the CONNECT line, the SNI or a
// plain request's URL — never by what the request itself says later.
type target struct {
	run    *run
	scheme string // "http" or "https"
	host   string // lower case, no trailing dot, IPv6 without brackets
	port   string
	pinned []netip.Addr // transparent mode: the only addresses to dial
}

func (t *target) hostport() string { return net.JoinHostPort(t.host, t.port) }

// display is the host as logs show it: with the port only when it is not
// the scheme's default.
func (t *target) display() string {
	if t.port == defaultPort(t.scheme) {
		if strings.Contains(t.host, ":") {
			return "[" + t.host + "]"
		}
		return t.host
	}
	return t.hostport()
}

func defaultPort(scheme string) string {
	if scheme == "https" {
		return "443"
	}
	return "80"
}

// splitTarget parses "host[:port]" as CONNECT or a URL gives it.
func splitTarget(hostport, defPort string) (host, port string, err error) {
	host, port, err = net.SplitHostPort(hostport)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			host, port = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), defPort
		} else {
			return "", "", fmt.Errorf("target %q: want host:port", hostport)
		}
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if n, perr := strconv.Atoi(port); perr != nil || n < 1 || n > 65535 {
		return "", "", fmt.Errorf("target %q: bad port", hostport)
	}
	if host == "" {
		return "", "", fmt.Errorf("target %q: empty host", hostport)
	}
	if _, perr := netip.ParseAddr(host); perr != nil {
		for _, c := range host {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
				return "", "", fmt.Errorf("target %q: not a host name", hostport)
			}
		}
	}
	return host, port, nil
}

// sameTarget reports whether a Host header or URL authority names the
// tunnel's own host and port. A missing port means the tunnel's port.
func (t *target) sameTarget(authority string) bool {
	if authority == "" {
		return true
	}
	h, p, err := splitTarget(authority, t.port)
	return err == nil && h == t.host && p == t.port
}

// exchange is one request on its way through the proxy.
type exchange struct {
	p     *Proxy
	st    *state
	t     *target
	in    *http.Request
	rules *apiRules // the API owning the dialled host, or nil
	entry *NetEntry
	log   *slog.Logger
	start time.Time

	// bodyRefusal, set for a streamed request body, returns the refusal
	// to answer with when the body held a token name that must not travel.
	bodyRefusal func() *http.Response

	mu       sync.Mutex
	injected bool
	bytesOut int64
}

// forward runs one request through the pipeline and always returns a
// response for the client, made up by the proxy when it refused.
func (p *Proxy) forward(in *http.Request, t *target) *http.Response {
	st := p.state.Load()
	x := &exchange{p: p, st: st, t: t, in: in, start: time.Now()}
	path, _ := p.redact.String(in.URL.Path)
	x.log = p.log.With("run", t.run.id)
	x.entry = t.run.record(NetEntry{Method: in.Method, Host: t.display(), Path: path})

	if t.run.isRevoked() {
		return x.refuse(http.StatusForbidden, "run_finished", "codeforge proxy: this run has finished; its proxy identity is revoked")
	}
	if in.Method == http.MethodConnect {
		return x.refuse(http.StatusMethodNotAllowed, "nested_connect", "codeforge proxy: CONNECT inside a tunnel is not supported")
	}
	// The dialled host decides everything; a request naming another host
	// is refused before any credential is looked at.
	if !t.sameTarget(in.Host) || !t.sameTarget(in.URL.Host) {
		return x.refuse(http.StatusMisdirectedRequest, "misdirected",
			fmt.Sprintf("codeforge proxy: this connection goes to %s; a request for another host (Host %q) must use its own connection", t.display(), in.Host))
	}
	if api := st.set.ForHost(t.host); api != nil {
		x.rules = st.apis[api.Name]
	}
	allowed := x.rules != nil && t.run.allows(x.rules.api.Name)
	if !allowed && !p.set.YOLO {
		return x.refuse(http.StatusForbidden, "host_not_allowed", x.notAllowedMessage())
	}
	if resp := x.checkMethod(); resp != nil {
		return resp
	}
	var fwd *apiRules
	if allowed {
		fwd = x.rules
	}
	out, refused := x.outgoing(fwd)
	if refused != nil {
		return refused
	}
	resp, err := p.transport.RoundTrip(out)
	if x.bodyRefusal != nil {
		// The request body held a token name that must not travel; the
		// stream was cut before it, and the answer (if any) is dropped.
		if refused := x.bodyRefusal(); refused != nil {
			if resp != nil {
				_ = resp.Body.Close()
			}
			return refused
		}
	}
	if err != nil {
		return x.upstreamError(err)
	}
	return x.incoming(resp)
}

func (x *exchange) notAllowedMessage() string {
	host := x.t.display()
	if x.rules != nil {
		return fmt.Sprintf("codeforge proxy: host %s belongs to API %q, which this run did not select; add %q to execute_code's apis to reach it",
			host, x.rules.api.Name, x.rules.api.Name)
	}
	return fmt.Sprintf("codeforge proxy: host %s is not configured; without YOLO mode the sandbox reaches only the domains of active APIs. "+
		"To allow it, add %q to the \"domains\" of an API in apis/<name>/config.json (see apis/README.md) and reload the proxy (SIGHUP), or enable YOLO_MODE",
		host, x.t.host)
}

type readCloser struct {
	io.Reader
	io.Closer
}

// endToEndHeaders copies h without its hop-by-hop headers: the fixed
// ones and those the Connection header names.
func endToEndHeaders(h http.Header) http.Header {
	out := h.Clone()
	if out == nil {
		out = http.Header{}
	}
	for _, f := range out.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				out.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		out.Del(name)
	}
	return out
}

func (x *exchange) ctx() context.Context {
	ctx := x.in.Context()
	if len(x.t.pinned) > 0 {
		ctx = context.WithValue(ctx, pinnedKey, x.t.pinned)
	}
	return ctx
}

func (x *exchange) addOut(n int64) {
	x.mu.Lock()
	x.bytesOut += n
	x.mu.Unlock()
	x.t.run.update(x.entry, func(e *NetEntry) { e.BytesOut += n })
}

func (x *exchange) setInjected() {
	x.mu.Lock()
	x.injected = true
	x.mu.Unlock()
	x.t.run.update(x.entry, func(e *NetEntry) { e.Injected = true })
}

// upstreamError turns a failed round trip into the client's answer.
func (x *exchange) upstreamError(err error) *http.Response {
	var priv *privateDestError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var certErr *tls.CertificateVerificationError
	msg := x.p.scrub(err.Error())
	switch {
	case errors.As(err, &priv):
		return x.refuse(http.StatusForbidden, "private_destination",
			fmt.Sprintf("codeforge proxy: %s resolves to %s, a loopback/private/link-local address; such destinations are refused (start the proxy with --allow-private-upstreams to allow them)",
				x.t.display(), priv.addr))
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr):
		return x.refuse(http.StatusBadGateway, "upstream_tls",
			fmt.Sprintf("codeforge proxy: the TLS certificate of %s could not be verified (%s); the proxy never talks to an unverified upstream (a private CA can be added with --upstream-ca)", x.t.display(), msg))
	case x.in.Context().Err() != nil:
		return x.refuse(http.StatusBadGateway, "client_gone", "codeforge proxy: the client went away")
	default:
		return x.refuse(http.StatusBadGateway, "upstream_unreachable",
			fmt.Sprintf("codeforge proxy: could not get a response from %s: %s", x.t.display(), msg))
	}
}

// finish completes the log entry and writes the request's log line.
func (x *exchange) finish(status int, in int64, blocked string, err error) {
	x.t.run.update(x.entry, func(e *NetEntry) {
		e.Status = status
		e.BytesIn = in
		e.Blocked = blocked
	})
	x.mu.Lock()
	injected, out := x.injected, x.bytesOut
	x.mu.Unlock()
	attrs := []any{"method", x.in.Method, "host", x.t.display(), "path", x.entryPath(), "status", status,
		"injected", injected, "bytes_out", out, "bytes_in", in, "ms", time.Since(x.start).Milliseconds()}
	if blocked != "" {
		attrs = append(attrs, "blocked", blocked)
	}
	if err != nil {
		attrs = append(attrs, "err", x.p.scrub(err.Error()))
	}
	x.log.Info("req", attrs...)
}

func (x *exchange) entryPath() string {
	p, _ := x.p.redact.String(x.in.URL.Path)
	return p
}

func (x *exchange) finishBlocked(status int, kind string) {
	x.finish(status, 0, kind, nil)
}

// refuse answers the client with a plain-text reason and logs the block.
func (x *exchange) refuse(status int, kind, msg string) *http.Response {
	x.finishBlocked(status, kind)
	return synthetic(x.in, status, kind, "text/plain; charset=utf-8", msg+"\n")
}

// synthetic builds a response the proxy makes up itself.
func synthetic(req *http.Request, status int, kind, contentType, body string) *http.Response {
	h := http.Header{}
	h.Set("Content-Type", contentType)
	h.Set(errorHeader, kind)
	h.Set("Cache-Control", "no-store")
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		ContentLength: int64(len(body)),
		Body:          io.NopCloser(strings.NewReader(body)),
		Request:       req,
	}
}

func textResponse(req *http.Request, status int, kind, msg string) *http.Response {
	return synthetic(req, status, kind, "text/plain; charset=utf-8", msg+"\n")
}

// countingBody counts request body bytes as they are read and reports the
// end of the body once.
type countingBody struct {
	r       io.Reader
	c       io.Closer
	onCount func(int64)
	onEOF   func()
	once    sync.Once
	errMu   sync.Mutex
	err     error // the error that ended the body, io.EOF included
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.onCount(int64(n))
	}
	if err != nil {
		b.errMu.Lock()
		b.err = err
		b.errMu.Unlock()
		b.once.Do(b.onEOF)
	}
	return n, err
}

func (b *countingBody) endErr() error {
	b.errMu.Lock()
	defer b.errMu.Unlock()
	return b.err
}

func (b *countingBody) Close() error { return b.c.Close() }

// capture keeps the first debugBody bytes written to it.
type capture struct {
	buf       bytes.Buffer
	truncated bool
}

func (c *capture) Write(p []byte) (int, error) {
	room := debugBody - c.buf.Len()
	if room < len(p) {
		c.truncated = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	c.buf.Write(p)
	return len(p), nil
}

func (c *capture) String() string {
	if c.truncated {
		return c.buf.String() + "…(truncated)"
	}
	return c.buf.String()
}

// headerString renders headers for a debug log line.
func headerString(h http.Header) string {
	var b strings.Builder
	_ = h.WriteSubset(&b, nil)
	return strings.TrimSpace(strings.ReplaceAll(b.String(), "\r\n", "; "))
}
