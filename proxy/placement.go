package proxy

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/proxy/rewrite"
)

// maxSmallRewritten bounds the buffered rewrite of a small request body;
// a body that substitution grows past it streams out chunked instead.
const maxSmallRewritten = 4 << 20

// maxEntryNotes bounds the notes one network log entry keeps.
const maxEntryNotes = 8

// placement decides, for one request to a host of an API the run may
// use, where that API's token names become values. A credential goes only
// to the API's own hosts (the caller checked), over verified TLS, to one
// of its ports, and only in the places its substitute_in names; a token
// name anywhere else travels as the name, and the network log says so.
type placement struct {
	x     *exchange
	rules *apiRules
	// refusal is why a token name that would be substituted cannot be
	// (cleartext, another port); the request is refused. "" when fine.
	refusal  string
	injected int
	tokens   []string // token names replaced
}

// transportProblem says why this request may carry no credential at all,
// or "" when it may.
func (pl *placement) transportProblem() string {
	t, api := pl.x.t, pl.rules.api
	port, _ := strconv.Atoi(t.port)
	switch {
	case t.scheme != "https":
		return fmt.Sprintf("credentials of API %q are only sent over HTTPS, and this request is plain http:// (use https://%s)", api.Name, t.display())
	case !api.AllowsPort(port):
		return fmt.Sprintf("credentials of API %q are only sent to port %s of its hosts, not to port %s (if the API really serves HTTPS there, add %s to \"ports\" in %s)",
			api.Name, joinPorts(api.Ports), t.port, t.port, configRef(api))
	}
	return ""
}

func joinPorts(ports []int) string {
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, ", ")
}

func configRef(api *apis.API) string { return "apis/" + api.Name + "/config.json" }

// place handles the token names in s, found in part where of the request:
// substituted with rep when the API opted in and the transport allows,
// left as names (with a note) when it did not opt in, a refusal when it
// opted in but the transport does not allow.
func (pl *placement) place(where, s string, rep *rewrite.Replacer) string {
	found := appendFound(nil, s, pl.rules.api.TokenNames())
	if len(found) == 0 {
		return s
	}
	if !pl.rules.api.SubstitutesIn(where) {
		pl.leftAsName(where, found)
		return s
	}
	if why := pl.transportProblem(); why != "" {
		pl.refuse(where, found, why)
		return s
	}
	out, n := rep.String(s)
	pl.injected += n
	for _, f := range found {
		if !slices.Contains(pl.tokens, f) {
			pl.tokens = append(pl.tokens, f)
		}
	}
	return out
}

func (pl *placement) refuse(where string, names []string, why string) {
	if pl.refusal == "" {
		pl.refusal = fmt.Sprintf("codeforge proxy: refused: the request's %s holds %s; %s. Nothing was sent.", where, strings.Join(names, ", "), why)
	}
}

// leftAsName notes in the run's network log that token names in where
// were sent as the names themselves, and which field would change that.
func (pl *placement) leftAsName(where string, names []string) {
	api := pl.rules.api
	pl.x.note(fmt.Sprintf("%s in the request %s was sent as the literal name, not the credential: API %q substitutes credentials only in its %s; "+
		"if the API really expects the key there, the user can add %q to \"substitute_in\" in %s",
		strings.Join(names, ", "), where, api.Name, describePlaces(api.SubstituteIn), where, configRef(api)))
	pl.x.log.Info("left_as_name", "host", pl.x.t.display(), "api", api.Name, "where", where, "tokens", names)
}

// basic substitutes inside a Basic Authorization credential, which the
// code writes base64-encoded ("user:TOKEN"), and remembers the pair so an
// echo of it comes back as the code wrote it.
func (pl *placement) basic(v string) string {
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return v
	}
	written := strings.TrimSpace(cred)
	raw, err := base64.StdEncoding.DecodeString(written)
	if err != nil {
		return v
	}
	before := pl.injected
	out := pl.place(apis.PlaceHeaders, string(raw), pl.rules.fwd)
	if pl.injected == before {
		return v
	}
	assembled := base64.StdEncoding.EncodeToString([]byte(out))
	pl.x.t.run.blobs.add(assembled, written)
	return scheme + " " + assembled
}

func appendFound(dst []string, s string, names []string) []string {
	for _, n := range names {
		if strings.Contains(s, n) && !slices.Contains(dst, n) {
			dst = append(dst, n)
		}
	}
	return dst
}

// outgoing builds the upstream request. Order: redaction, then credential
// placement (fwd; nil when this host gets none), then User-Agent. A
// non-nil response is the proxy's refusal, to be sent instead.
func (x *exchange) outgoing(fwd *apiRules) (*http.Request, *http.Response) {
	in := x.in
	p := x.p
	h := endToEndHeaders(in.Header)
	// A credential stored through an API must not come back in pieces too
	// short to recognise: no partial reads through the proxy.
	h.Del("Range")
	h.Del("If-Range")

	var pl *placement
	if fwd != nil {
		pl = &placement{x: x, rules: fwd}
	}
	var redacted int
	sub := func(where, s string, rep func(*apiRules) *rewrite.Replacer) string {
		out, n := p.redact.String(s)
		redacted += n
		if pl != nil {
			out = pl.place(where, out, rep(fwd))
		}
		return out
	}
	debugHeaders := http.Header{}
	for k, vs := range h {
		for i, v := range vs {
			if p.set.Debug {
				r, _ := p.redact.String(v)
				debugHeaders[k] = append(debugHeaders[k], r)
			}
			v = sub(apis.PlaceHeaders, v, func(r *apiRules) *rewrite.Replacer { return r.fwd })
			if pl != nil && strings.EqualFold(k, "Authorization") {
				v = pl.basic(v)
			}
			vs[i] = v
		}
	}
	u := &url.URL{Scheme: x.t.scheme, Host: x.t.hostport()}
	escPath := sub(apis.PlacePath, in.URL.EscapedPath(), func(r *apiRules) *rewrite.Replacer { return r.fwdPath })
	path, err := url.PathUnescape(escPath)
	if err != nil {
		return nil, x.refuse(http.StatusBadRequest, "bad_request", "codeforge proxy: request path: "+p.scrub(err.Error()))
	}
	u.Path = path
	if path != escPath {
		u.RawPath = escPath
	}
	u.RawQuery = sub(apis.PlaceQuery, in.URL.RawQuery, func(r *apiRules) *rewrite.Replacer { return r.fwdQuery })
	if p.set.UserAgent != "" {
		h.Set("User-Agent", p.set.UserAgent)
	} else if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""} // keep Go's default off the wire
	}
	// Ask only for what the proxy can decode to scrub the response.
	h.Set("Accept-Encoding", "gzip, deflate")

	if pl != nil && pl.refusal != "" {
		return nil, x.refuse(http.StatusForbidden, "credential_not_sent", pl.refusal)
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
	if pl != nil && pl.injected > 0 {
		x.setInjected()
		x.log.Info("inject", "host", x.t.display(), "api", fwd.api.Name, "where", "header+url", "tokens", pl.tokens, "count", pl.injected)
	}
	if p.set.Debug {
		redURL, _ := p.redact.String(in.URL.RequestURI())
		x.log.Debug("payload", "dir", "out", "method", in.Method, "host", x.t.display(), "url", p.scrub(redURL), "headers", p.scrub(fmt.Sprint(debugHeaders)))
	}
	if resp := x.outgoingBody(out, pl); resp != nil {
		return nil, resp
	}
	return out, nil
}

// bodyPlan is what happens to the token names in a request body.
type bodyPlan struct {
	rep    *rewrite.Replacer // substitutes (or finds) token names; nil: nothing to do
	mode   string            // "inject", "note" or "refuse"
	reason string            // for "refuse"
}

// planBody decides what happens to token names in the request body.
func (pl *placement) planBody(h http.Header) bodyPlan {
	api := pl.rules.api
	if len(api.Credentials) == 0 {
		return bodyPlan{}
	}
	if !api.SubstitutesIn(apis.PlaceBody) {
		return bodyPlan{rep: pl.rules.names, mode: "note"}
	}
	if why := pl.transportProblem(); why != "" {
		return bodyPlan{rep: pl.rules.namesRefused, mode: "refuse", reason: why}
	}
	if h.Get("Content-Encoding") != "" && !strings.EqualFold(strings.TrimSpace(h.Get("Content-Encoding")), "identity") {
		// Names inside a compressed body cannot be seen; they stay names.
		return bodyPlan{}
	}
	cts := h.Values("Content-Type")
	if len(cts) > 1 {
		return bodyPlan{rep: pl.rules.namesRefused, mode: "refuse",
			reason: "the body has several Content-Type headers, so the proxy cannot tell how to encode a credential in it; send one"}
	}
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	switch {
	case mt == "application/x-www-form-urlencoded":
		return bodyPlan{rep: pl.rules.fwdQuery, mode: "inject"}
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		return bodyPlan{rep: pl.rules.fwdJSON, mode: "inject"}
	}
	return bodyPlan{rep: pl.rules.fwd, mode: "inject"}
}

// outgoingBody streams the request body through redaction and credential
// placement. A small body of known length is rewritten whole so it keeps
// an exact Content-Length (and a refusal can still be answered); anything
// else goes chunked. A non-nil response is the proxy's refusal.
func (x *exchange) outgoingBody(out *http.Request, pl *placement) *http.Response {
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
	var plan bodyPlan
	if pl != nil {
		plan = pl.planBody(in.Header)
	}
	var sub *rewrite.Reader
	if plan.rep != nil && !plan.rep.Empty() {
		sub = plan.rep.Reader(r)
		r = sub
	}
	done := func() {
		if red != nil && red.Count() > 0 {
			x.log.Info("redact", "host", x.t.display(), "where", "body", "count", red.Count())
		}
		if sub != nil && len(sub.Matched()) > 0 {
			switch plan.mode {
			case "inject":
				x.setInjected()
				x.log.Info("inject", "host", x.t.display(), "api", pl.rules.api.Name, "where", "body", "tokens", sub.Matched(), "count", sub.Count())
			case "note":
				pl.leftAsName(apis.PlaceBody, sub.Matched())
			}
		}
		if dbg != nil {
			x.log.Debug("payload", "dir", "out", "host", x.t.display(), "body", x.p.scrub(dbg.String()))
		}
	}
	refusal := func(err error) *http.Response {
		var re *rewrite.RefusedError
		if plan.mode == "refuse" && errors.As(err, &re) {
			return x.refuse(http.StatusForbidden, "credential_not_sent",
				fmt.Sprintf("codeforge proxy: refused: the request's body holds %s; %s. Nothing was sent.", re.Label, plan.reason))
		}
		return nil
	}
	body := &countingBody{r: r, c: in.Body, onCount: x.addOut, onEOF: done}
	if red == nil && sub == nil {
		out.Body, out.ContentLength = body, in.ContentLength
		return nil
	}
	if in.ContentLength > 0 && in.ContentLength <= smallBody {
		buf, err := io.ReadAll(io.LimitReader(body, maxSmallRewritten+1))
		if err != nil {
			if resp := refusal(err); resp != nil {
				return resp
			}
			return x.refuse(http.StatusBadRequest, "bad_request", "codeforge proxy: read request body: "+x.p.scrub(err.Error()))
		}
		if len(buf) <= maxSmallRewritten {
			_ = in.Body.Close()
			out.Body, out.ContentLength = io.NopCloser(bytes.NewReader(buf)), int64(len(buf))
			return nil
		}
		// Substitution grew it past the buffer: send the rest as it comes.
		out.Body, out.ContentLength = readCloser{io.MultiReader(bytes.NewReader(buf), body), body}, -1
	} else {
		out.Body, out.ContentLength = body, -1
	}
	if plan.mode == "refuse" {
		x.bodyRefusal = func() *http.Response { return refusal(body.endErr()) }
	}
	return nil
}

// note adds a line to the request's network log entry.
func (x *exchange) note(msg string) {
	x.t.run.update(x.entry, func(e *NetEntry) {
		if len(e.Notes) < maxEntryNotes && !slices.Contains(e.Notes, msg) {
			e.Notes = append(e.Notes, msg)
		}
	})
}
