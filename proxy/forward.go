package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/codeforge/codeforge/proxy/rewrite"
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
	out, err := x.outgoing(fwd)
	if err != nil {
		return x.refuse(http.StatusBadRequest, "bad_request", "codeforge proxy: "+p.scrub(err.Error()))
	}
	resp, err := p.transport.RoundTrip(out)
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

// outgoing builds the upstream request. Order: redaction, then credential
// substitution (fwd; nil when this host gets none), then User-Agent.
func (x *exchange) outgoing(fwd *apiRules) (*http.Request, error) {
	in := x.in
	p := x.p
	h := endToEndHeaders(in.Header)

	var redacted, injected int
	var tokens []string
	sub := func(s string, r *rewrite.Replacer) string {
		out, n := p.redact.String(s)
		redacted += n
		if fwd != nil && r != nil {
			tokens = appendFound(tokens, out, fwd.api.TokenNames())
			out, n = r.String(out)
			injected += n
		}
		return out
	}
	var fwdRaw, fwdPath, fwdQuery *rewrite.Replacer
	if fwd != nil {
		fwdRaw, fwdPath, fwdQuery = fwd.fwd, fwd.fwdPath, fwd.fwdQuery
	}
	debugHeaders := http.Header{}
	for k, vs := range h {
		for i, v := range vs {
			if p.set.Debug {
				r, _ := p.redact.String(v)
				debugHeaders[k] = append(debugHeaders[k], r)
			}
			v = sub(v, fwdRaw)
			if fwd != nil && strings.EqualFold(k, "Authorization") {
				v = x.substituteBasic(v, fwd, &injected, &tokens)
			}
			vs[i] = v
		}
	}
	u := &url.URL{Scheme: x.t.scheme, Host: x.t.hostport()}
	escPath := sub(in.URL.EscapedPath(), fwdPath)
	path, err := url.PathUnescape(escPath)
	if err != nil {
		return nil, fmt.Errorf("request path: %w", err)
	}
	u.Path = path
	if path != escPath {
		u.RawPath = escPath
	}
	u.RawQuery = sub(in.URL.RawQuery, fwdQuery)
	if p.set.UserAgent != "" {
		h.Set("User-Agent", p.set.UserAgent)
	} else if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""} // keep Go's default off the wire
	}
	if x.rules != nil {
		// Ask only for what the proxy can decode to rewrite the response.
		h.Set("Accept-Encoding", "gzip, deflate")
	}

	out := (&http.Request{
		Method:     in.Method,
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
		Host:       in.Host,
	}).WithContext(x.ctx())
	if out.Host == "" {
		out.Host = x.t.display()
	}
	if redacted > 0 {
		x.log.Info("redact", "host", x.t.display(), "where", "header+url", "count", redacted)
	}
	if injected > 0 {
		x.setInjected()
		x.log.Info("inject", "host", x.t.display(), "api", fwd.api.Name, "where", "header+url", "tokens", tokens, "count", injected)
	}
	if p.set.Debug {
		redURL, _ := p.redact.String(in.URL.RequestURI())
		x.log.Debug("payload", "dir", "out", "method", in.Method, "host", x.t.display(), "url", p.scrub(redURL), "headers", p.scrub(fmt.Sprint(debugHeaders)))
	}
	if err := x.outgoingBody(out, fwdRaw); err != nil {
		return nil, err
	}
	return out, nil
}

// substituteBasic substitutes inside a Basic Authorization credential,
// which the code writes base64-encoded ("user:TOKEN").
func (x *exchange) substituteBasic(v string, fwd *apiRules, injected *int, tokens *[]string) string {
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return v
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return v
	}
	*tokens = appendFound(*tokens, string(raw), fwd.api.TokenNames())
	out, n := fwd.fwd.String(string(raw))
	if n == 0 {
		return v
	}
	*injected += n
	return scheme + " " + base64.StdEncoding.EncodeToString([]byte(out))
}

func appendFound(dst []string, s string, names []string) []string {
	for _, n := range names {
		if strings.Contains(s, n) && !slices.Contains(dst, n) {
			dst = append(dst, n)
		}
	}
	return dst
}

func (x *exchange) ctx() context.Context {
	ctx := x.in.Context()
	if len(x.t.pinned) > 0 {
		ctx = context.WithValue(ctx, pinnedKey, x.t.pinned)
	}
	return ctx
}

// outgoingBody streams the request body through redaction and
// substitution. A small body of known length is rewritten whole so it
// keeps an exact Content-Length; anything else goes chunked.
func (x *exchange) outgoingBody(out *http.Request, fwd *rewrite.Replacer) error {
	in := x.in
	if in.Body == nil || in.Body == http.NoBody || in.ContentLength == 0 {
		out.Body = http.NoBody
		return nil
	}
	var r io.Reader = in.Body
	var red *rewrite.Reader
	if !x.p.redact.Empty() {
		red = x.p.redact.Reader(r)
		r = red
	}
	var dbg *capture
	if x.p.set.Debug {
		dbg = &capture{}
		r = io.TeeReader(r, dbg)
	}
	var sub *rewrite.Reader
	if fwd != nil && !fwd.Empty() {
		sub = fwd.Reader(r)
		r = sub
	}
	done := func() {
		if red != nil && red.Count() > 0 {
			x.log.Info("redact", "host", x.t.display(), "where", "body", "count", red.Count())
		}
		if sub != nil && sub.Count() > 0 {
			x.setInjected()
			x.log.Info("inject", "host", x.t.display(), "api", x.rules.api.Name, "where", "body", "tokens", x.rules.api.TokenNames(), "count", sub.Count())
		}
		if dbg != nil {
			x.log.Debug("payload", "dir", "out", "host", x.t.display(), "body", x.p.scrub(dbg.String()))
		}
	}
	body := &countingBody{r: r, c: in.Body, onCount: x.addOut, onEOF: done}
	if red == nil && sub == nil {
		out.Body, out.ContentLength = body, in.ContentLength
		return nil
	}
	if in.ContentLength > 0 && in.ContentLength <= smallBody {
		// Bounded: the rewritten form of at most smallBody bytes.
		buf, err := io.ReadAll(io.LimitReader(body, 64*smallBody))
		if err != nil {
			return fmt.Errorf("read request body: %w", err)
		}
		_ = in.Body.Close()
		out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(buf)), int64(len(buf))
		return nil
	}
	out.Body, out.ContentLength = body, -1
	return nil
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

// incoming rewrites the upstream response for the client. For hosts of a
// configured API every credential value of that API becomes its token name
// again, in headers and body, after decoding the body; what cannot be
// decoded is refused.
func (x *exchange) incoming(resp *http.Response) *http.Response {
	h := endToEndHeaders(resp.Header)
	out := &http.Response{
		Status:        resp.Status,
		StatusCode:    resp.StatusCode,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		ContentLength: resp.ContentLength,
		Request:       x.in,
		Trailer:       resp.Trailer,
	}
	noBody := resp.Body == nil || resp.Body == http.NoBody || x.in.Method == http.MethodHead ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified ||
		(resp.StatusCode >= 100 && resp.StatusCode < 200)

	if x.rules == nil {
		// Not an API host: nothing of ours was sent there, nothing to take back.
		out.Body = x.responseBody(out, resp.Body, resp.Body, nil, noBody)
		return out
	}

	rev := x.rules.rev
	if resp.StatusCode == http.StatusSwitchingProtocols {
		_ = resp.Body.Close()
		return x.refuse(http.StatusBadGateway, "cannot_rewrite", "codeforge proxy: the upstream switched protocols; the proxy cannot rewrite that stream, so it refuses it")
	}
	var encodings []string
	for _, v := range h.Values("Content-Encoding") {
		for _, e := range strings.Split(v, ",") {
			if e = strings.ToLower(strings.TrimSpace(e)); e != "" && e != "identity" {
				encodings = append(encodings, e)
			}
		}
	}
	for _, e := range encodings {
		if e != "gzip" && e != "x-gzip" && e != "deflate" {
			_ = resp.Body.Close()
			return x.refuse(http.StatusBadGateway, "cannot_rewrite",
				fmt.Sprintf("codeforge proxy: %s answered with Content-Encoding %q, which the proxy cannot decode to take credentials out of it; refused rather than passed through", x.t.display(), e))
		}
	}
	var count int
	for _, vs := range h {
		for i, v := range vs {
			nv, n := rev.String(v)
			vs[i] = nv
			count += n
		}
	}
	if s, n := rev.String(out.Status); n > 0 {
		out.Status = s
		count += n
	}
	if count > 0 {
		x.log.Info("sanitize", "host", x.t.display(), "where", "header", "count", count)
	}
	// Trailers arrive after the body and are not rewritten: drop them.
	out.Trailer = nil
	h.Del("Trailer")
	h.Del("Content-Length")
	h.Del("Content-Encoding")
	out.ContentLength = -1
	if noBody {
		out.ContentLength = 0
		out.Body = x.responseBody(out, resp.Body, resp.Body, nil, true)
		return out
	}
	decoded, err := decodeBody(resp.Body, encodings)
	if err != nil {
		_ = resp.Body.Close()
		return x.refuse(http.StatusBadGateway, "cannot_rewrite",
			fmt.Sprintf("codeforge proxy: %s sent a body the proxy cannot decode (%s); refused rather than passed through", x.t.display(), x.p.scrub(err.Error())))
	}
	rd := rev.Reader(decoded)
	out.Body = x.responseBody(out, rd, resp.Body, rd, false)
	return out
}

// responseBody wraps what the client reads; it keeps the network log and
// writes the request's log lines when the body ends.
func (x *exchange) responseBody(resp *http.Response, r io.Reader, c io.Closer, rev *rewrite.Reader, empty bool) io.ReadCloser {
	status := resp.StatusCode
	b := &respBody{x: x, status: status, r: r, c: c, rev: rev}
	if x.p.set.Debug {
		b.dbg = &capture{}
		b.header = resp.Header.Clone()
	}
	x.t.run.update(x.entry, func(e *NetEntry) { e.Status = status })
	if empty {
		if c != nil {
			_ = c.Close()
		}
		b.finish(nil)
		return http.NoBody
	}
	return b
}

type respBody struct {
	x      *exchange
	status int
	header http.Header // for DEBUG_MODE
	r      io.Reader
	c      io.Closer
	rev    *rewrite.Reader
	dbg    *capture
	n      int64
	once   sync.Once
}

func (b *respBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.n += int64(n)
		if b.dbg != nil {
			_, _ = b.dbg.Write(p[:n])
		}
	}
	if err == io.EOF {
		b.finish(nil)
	} else if err != nil {
		b.finish(err)
	}
	return n, err
}

func (b *respBody) Close() error {
	err := b.c.Close()
	b.finish(errors.New("closed before the end"))
	return err
}

func (b *respBody) finish(err error) {
	b.once.Do(func() {
		x := b.x
		if b.rev != nil && b.rev.Count() > 0 {
			x.log.Info("sanitize", "host", x.t.display(), "where", "body", "count", b.rev.Count())
		}
		if b.dbg != nil {
			x.log.Debug("payload", "dir", "in", "host", x.t.display(), "status", b.status,
				"headers", x.p.scrub(headerString(b.header)), "body", x.p.scrub(b.dbg.String()))
		}
		x.finish(b.status, b.n, "", err)
	})
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
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 {
		b.onCount(int64(n))
	}
	if err != nil {
		b.once.Do(b.onEOF)
	}
	return n, err
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
