package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/codeforge/codeforge/proxy/rewrite"
)

// maxPreread is the largest declared response length that is read and
// scrubbed whole before the answer starts, so that a response which must
// be refused still gets a clean 502; longer or unsized (streamed)
// responses are scrubbed as they flow and cut where a refusal hits.
// maxPrereadDecoded bounds what such a body may decompress to in memory.
const (
	maxPreread        = 1 << 20
	maxPrereadDecoded = 4 << 20
)

// incoming scrubs the upstream response for the client. Every response
// from every host — configured or not, any port — has every credential
// value of every API turned back into its token name, in headers and
// body, after decoding the body, however it is spelt; a form that cannot
// be turned back (base64) is refused, and so is what cannot be decoded or
// scrubbed at all (other content codings, protocol switches, partial
// content).
func (x *exchange) incoming(resp *http.Response) *http.Response {
	h := endToEndHeaders(resp.Header)
	out := &http.Response{
		Status:     resp.Status,
		StatusCode: resp.StatusCode,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
		Request:    x.in,
	}
	noBody := resp.Body == nil || resp.Body == http.NoBody || x.in.Method == http.MethodHead ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified ||
		(resp.StatusCode >= 100 && resp.StatusCode < 200)
	fail := func(kind, msg string) *http.Response {
		if resp.Body != nil {
			_ = resp.Body.Close()
		}
		x.log.Warn("refuse_response", "host", x.t.display(), "kind", kind)
		return x.refuse(http.StatusBadGateway, kind, msg)
	}

	switch resp.StatusCode {
	case http.StatusSwitchingProtocols:
		return fail("cannot_rewrite", "codeforge proxy: the upstream switched protocols; the proxy cannot scrub that stream, so it refuses it")
	case http.StatusPartialContent:
		return fail("partial_content", fmt.Sprintf("codeforge proxy: %s answered with part of a resource (206); the proxy passes no partial reads, "+
			"since a credential could come back in pieces too short to recognise: request the whole resource", x.t.display()))
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
			return fail("cannot_rewrite",
				fmt.Sprintf("codeforge proxy: %s answered with Content-Encoding %q, which the proxy cannot decode to take credentials out of it; refused rather than passed through", x.t.display(), e))
		}
	}

	rev := x.t.run.blobs.reverse(x.st)
	var count int
	for name, vs := range h {
		for i, v := range vs {
			nv, n, err := rev.Rewrite(v)
			if err != nil {
				return fail("credential_in_response", refusedMessage(x, "header "+name, err))
			}
			vs[i] = nv
			count += n
		}
	}
	status, n, err := rev.Rewrite(out.Status)
	if err != nil {
		return fail("credential_in_response", refusedMessage(x, "status line", err))
	}
	out.Status = status
	count += n
	if count > 0 {
		x.log.Info("sanitize", "host", x.t.display(), "where", "header", "count", count)
	}
	// Trailers arrive after the body and are not scrubbed: drop them.
	h.Del("Trailer")
	h.Del("Content-Length")
	h.Del("Content-Encoding")
	out.ContentLength = -1
	if noBody {
		out.ContentLength = 0
		out.Body = x.responseBody(out, nil, resp.Body, nil, true)
		return out
	}
	decoded, err := decodeBody(resp.Body, encodings)
	if err != nil {
		return fail("cannot_rewrite",
			fmt.Sprintf("codeforge proxy: %s sent a body the proxy cannot decode (%s); refused rather than passed through", x.t.display(), x.p.scrub(err.Error())))
	}
	rd := rev.Reader(decoded)
	if resp.ContentLength < 0 || resp.ContentLength > maxPreread {
		out.Body = x.responseBody(out, rd, resp.Body, rd, false)
		return out
	}
	buf, err := io.ReadAll(io.LimitReader(rd, maxPrereadDecoded+1))
	var re *rewrite.RefusedError
	switch {
	case errors.As(err, &re):
		return fail("credential_in_response", refusedMessage(x, "body", err))
	case err != nil:
		return fail("upstream_unreachable", fmt.Sprintf("codeforge proxy: reading the response of %s failed: %s", x.t.display(), x.p.scrub(err.Error())))
	case len(buf) > maxPrereadDecoded:
		// It decompresses to more than the pre-read holds: stream the rest.
		out.Body = x.responseBody(out, io.MultiReader(bytes.NewReader(buf), rd), resp.Body, rd, false)
		return out
	}
	_ = resp.Body.Close()
	out.ContentLength = int64(len(buf))
	out.Body = x.responseBody(out, bytes.NewReader(buf), io.NopCloser(nil), rd, false)
	return out
}

// refusedMessage explains a response refused for holding a credential in a
// form that cannot be turned back into its name.
func refusedMessage(x *exchange, where string, err error) string {
	label := "a credential"
	var re *rewrite.RefusedError
	if errors.As(err, &re) {
		label = re.Label
	}
	return fmt.Sprintf("codeforge proxy: the response of %s holds a credential (%s) in its %s in a form the proxy cannot turn back into the token name; "+
		"refused so that no secret reaches the sandbox", x.t.display(), label, where)
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
		blocked := ""
		var re *rewrite.RefusedError
		if errors.As(err, &re) {
			// Past the pre-read the answer had started: the stream is cut
			// where the credential begins.
			blocked = "credential_in_response"
			x.log.Warn("refuse_response", "host", x.t.display(), "kind", blocked, "where", "body (cut mid-stream)")
			x.note(refusedMessage(x, "body", err) + "; the body was cut there")
		}
		x.finish(b.status, b.n, blocked, err)
	})
}
