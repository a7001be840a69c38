package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"strings"
)

// Method rules (restricted_methods, allowed_methods) hold only if every
// way a framework lets a request ask for another method is read: the
// request line, the override headers, and a _method parameter in the
// query or the body. Where the proxy cannot read a body for certain
// (compressed, ambiguous, unparsable, too large), it refuses the request
// rather than guess: an upstream's parser could see a _method it missed.
// APIs without method rules are never checked, and their bodies never
// read here.

// methodOverrides are the headers frameworks read to turn a POST into
// another method (Rails, Symfony, Express: X-HTTP-Method-Override;
// OData: X-HTTP-Method). They are matched in any case and with '_' for
// '-', as CGI-style servers map both to the same variable.
var methodOverrides = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// maxBodyPeek bounds how much of a request body is read to look for a
// _method field; a larger body to an API with method rules gets 413.
const maxBodyPeek = 1 << 20

// askedMethod is one method a request asks for, and where it asks.
type askedMethod struct {
	method string // as written
	via    string // for the refusal message
}

// checkMethod refuses a request to an API with method rules when any
// method it asks for is not allowed, or when its body cannot be read for
// certain. It returns nil to let the request go on; a body it read is put
// back intact.
func (x *exchange) checkMethod() *http.Response {
	if x.rules == nil || !x.rules.api.HasMethodRules() {
		return nil
	}
	if resp := x.refuseMethods(x.headMethods()); resp != nil {
		return resp
	}
	asked, resp := x.bodyMethods()
	if resp != nil {
		return resp
	}
	return x.refuseMethods(asked)
}

// headMethods are the methods asked for in the request line, the override
// headers (every line, every comma-separated value) and the query.
func (x *exchange) headMethods() []askedMethod {
	in := x.in
	asked := []askedMethod{{in.Method, "the request method"}}
	var keys []string
	for k := range in.Header {
		if isOverrideHeader(k) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys) // so the refusal names the same header every time
	for _, k := range keys {
		for _, v := range in.Header[k] {
			for _, m := range strings.Split(v, ",") {
				asked = append(asked, askedMethod{m, "the " + k + " header"})
			}
		}
	}
	for _, m := range methodParams(in.URL.RawQuery) {
		asked = append(asked, askedMethod{m, "the _method query parameter"})
	}
	return asked
}

func isOverrideHeader(name string) bool {
	name = strings.ReplaceAll(name, "_", "-")
	for _, h := range methodOverrides {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}

// refuseMethods answers the first asked method the API does not let
// through with a permanent 403; nil when all pass. Empty values ask for
// nothing (no framework takes an empty override).
func (x *exchange) refuseMethods(asked []askedMethod) *http.Response {
	api := x.rules.api
	for _, a := range asked {
		m := strings.ToUpper(strings.TrimSpace(a.method))
		if m == "" || api.MethodAllowed(m) {
			continue
		}
		m = truncate(m, 40) // it is the caller's text, and goes into logs
		rule := fmt.Sprintf("are blocked by the restricted_methods of API %q", api.Name)
		if api.AllowedMethods != nil {
			rule = fmt.Sprintf("are not in the allowed_methods of API %q (only %s pass)", api.Name, strings.Join(api.AllowedMethods, ", "))
		}
		x.log.Info("restrict", "host", x.t.display(), "api", api.Name, "method", m, "via", a.via)
		return x.methodRefusal(map[string]string{
			"method": m,
			"via":    a.via,
			"message": fmt.Sprintf("%s requests to %s %s; this request asked for %s through %s. "+
				"This is a permanent configuration restriction, not a temporary error: do not retry, and do not try another way around it; "+
				"if the user needs it, they must change apis/%s/config.json.", m, x.t.display(), rule, m, a.via, api.Name),
		})
	}
	return nil
}

// methodRefusal is the 403 JSON answer of every method-rule refusal.
func (x *exchange) methodRefusal(fields map[string]string) *http.Response {
	fields["error"] = "method_restricted"
	fields["host"] = x.t.display()
	fields["api"] = x.rules.api.Name
	body, _ := json.Marshal(fields)
	resp := synthetic(x.in, http.StatusForbidden, "method_restricted", "application/json", string(body)+"\n")
	x.finishBlocked(resp.StatusCode, "method_restricted")
	return resp
}

// ruleField names the API's method-rule field and its config file.
func (x *exchange) ruleField() string {
	field := "restricted_methods"
	if x.rules.api.AllowedMethods != nil {
		field = "allowed_methods"
	}
	return fmt.Sprintf("%s in apis/%s/config.json", field, x.rules.api.Name)
}

// unreadable refuses a body the proxy cannot check for certain, saying
// why (what) and what to send instead (fix).
func (x *exchange) unreadable(reason, what, fix string) *http.Response {
	api := x.rules.api.Name
	x.log.Info("restrict", "host", x.t.display(), "api", api, "reason", reason)
	return x.methodRefusal(map[string]string{
		"reason": reason,
		"message": fmt.Sprintf("API %q has method rules (%s), so the proxy reads a request body for a _method override before it goes out; %s, so it cannot be checked and is refused. %s",
			api, x.ruleField(), what, fix),
	})
}

// bodyKinds say how an upstream framework may parse a body.
type bodyKinds struct {
	form      bool   // URL-encoded (also a POST body without Content-Type: Rack)
	bare      bool   // no Content-Type at all
	json      bool   // Laravel: any Content-Type containing "/json" or "+json"
	multipart string // the boundary, for multipart/*
}

func (k bodyKinds) any() bool { return k.form || k.json || k.multipart != "" }

// bodyMethods reads the _method fields of a body frameworks parse
// (URL-encoded, multipart, JSON, or no Content-Type) and refuses bodies it
// cannot read for certain.
func (x *exchange) bodyMethods() ([]askedMethod, *http.Response) {
	in := x.in
	if in.Body == nil || in.Body == http.NoBody || in.ContentLength == 0 {
		return nil, nil
	}
	for _, v := range in.Header.Values("Content-Encoding") {
		for _, e := range strings.Split(v, ",") {
			if e = strings.TrimSpace(e); e != "" && !strings.EqualFold(e, "identity") {
				return nil, x.unreadable("compressed_body", fmt.Sprintf("this body is compressed (Content-Encoding %q)", truncate(v, 80)),
					"Send the body uncompressed (no Content-Encoding).")
			}
		}
	}
	kinds, what, fix := parseBodyType(in.Method, in.Header.Values("Content-Type"))
	if what != "" {
		return nil, x.unreadable("ambiguous_body", what, fix)
	}
	if !kinds.any() {
		return nil, nil // no framework takes _method from this body: stream it
	}
	buf, resp := x.peekBody(kinds)
	if resp != nil || len(buf) == 0 {
		return nil, resp
	}
	var asked []askedMethod
	if kinds.form {
		via := "a _method field of the URL-encoded form body"
		if kinds.bare {
			via = "a _method field of the body (a body without Content-Type is read as a form, as Rack does)"
		}
		for _, m := range methodParams(string(buf)) {
			asked = append(asked, askedMethod{m, via})
		}
	}
	if kinds.json {
		ms, what := jsonMethods(buf)
		if what != "" {
			return nil, x.unreadable("ambiguous_body", what, "Send valid JSON whose top-level \"_method\", if any, is a string naming an allowed method.")
		}
		for _, m := range ms {
			asked = append(asked, askedMethod{m, "a top-level _method field of the JSON body"})
		}
	}
	if kinds.multipart != "" {
		ms, what := multipartMethods(buf, kinds.multipart)
		if what != "" {
			return nil, x.unreadable("ambiguous_body", what, "Send a well-formed multipart body with plain form-data parts (name=\"...\"), CRLF line ends and no Content-Transfer-Encoding.")
		}
		for _, m := range ms {
			asked = append(asked, askedMethod{m, "a _method part of the multipart body"})
		}
	}
	return asked, nil
}

// parseBodyType classifies the Content-Type header lines of a request
// with this method; when they are ambiguous, what says why and fix what to
// send instead.
func parseBodyType(method string, values []string) (k bodyKinds, what, fix string) {
	const oneType = "Send one Content-Type header, e.g. \"application/json\", \"application/x-www-form-urlencoded\" or \"multipart/form-data; boundary=...\"."
	if len(values) > 1 {
		return k, fmt.Sprintf("it has %d Content-Type headers, which servers resolve differently", len(values)), oneType
	}
	ct := ""
	if len(values) == 1 {
		ct = strings.TrimSpace(values[0])
	}
	if ct == "" {
		// Rack reads a POST body without Content-Type as a form (and
		// overrides only POST); other methods' bare bodies nobody parses.
		return bodyKinds{form: strings.EqualFold(method, http.MethodPost), bare: true}, "", ""
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return k, fmt.Sprintf("its Content-Type %q does not parse (%v)", truncate(ct, 200), err), oneType
	}
	lower := strings.ToLower(ct)
	k.form = mt == "application/x-www-form-urlencoded"
	k.json = strings.Contains(lower, "/json") || strings.Contains(lower, "+json")
	if strings.HasPrefix(mt, "multipart/") {
		const fixBoundary = "Send one boundary parameter of letters, digits and '-', e.g. \"multipart/form-data; boundary=----x1234\" (what fetch() with a FormData body sends)."
		b := params["boundary"]
		switch {
		case b == "":
			return bodyKinds{}, fmt.Sprintf("its Content-Type %q has no boundary", truncate(ct, 200)), fixBoundary
		case strings.Count(lower, "boundary=") != 1 || strings.Index(lower, "boundary") != strings.Index(lower, "boundary="):
			// PHP takes the value after the first "boundary" substring
			// (also inside another parameter), Rack after the last
			// "boundary=": with one, both agree with Go.
			return bodyKinds{}, fmt.Sprintf("its Content-Type %q names a boundary more than once", truncate(ct, 200)), fixBoundary
		case len(b) > 70 || strings.Trim(b, boundaryChars) != "":
			// Rack cuts a boundary at ',', ';' or '"'; Go does not.
			return bodyKinds{}, fmt.Sprintf("its multipart boundary %q has characters other than letters, digits and %s (or is over 70 long)", truncate(b, 80), boundaryPunct), fixBoundary
		}
		k.multipart = b
	}
	if k.any() {
		switch cs := strings.ToLower(params["charset"]); cs {
		case "", "utf-8", "utf8", "us-ascii", "iso-8859-1":
		default:
			// An upstream that decodes charset=utf-16 would see a _method
			// the proxy reads as bytes.
			return bodyKinds{}, fmt.Sprintf("its charset %q is not UTF-8 or ASCII", truncate(params["charset"], 40)), "Send the body in UTF-8 (charset=utf-8)."
		}
	}
	return k, "", ""
}

const (
	boundaryPunct = "'()+_-./:=?"
	boundaryChars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" + boundaryPunct
)

// peekBody reads the whole body (at most maxBodyPeek bytes) and puts it
// back in front of the rest, so the upstream receives exactly what was
// sent.
func (x *exchange) peekBody(kinds bodyKinds) ([]byte, *http.Response) {
	in := x.in
	var b bytes.Buffer
	if in.ContentLength > 0 && in.ContentLength <= maxBodyPeek {
		b.Grow(int(in.ContentLength) + bytes.MinRead) // one allocation, no regrowth
	}
	_, err := b.ReadFrom(io.LimitReader(in.Body, maxBodyPeek+1))
	buf := b.Bytes()
	in.Body = peekedBody{io.MultiReader(bytes.NewReader(buf), in.Body), in.Body}
	if err != nil {
		return nil, x.refuse(http.StatusBadRequest, "bad_request", "codeforge proxy: read request body: "+x.p.scrub(err.Error()))
	}
	if len(buf) <= maxBodyPeek {
		return buf, nil
	}
	what, fix := "a form, JSON or multipart body", "send less per request"
	if kinds.bare {
		what, fix = "a body without a Content-Type (which Rack reads as a form)", "set the Content-Type that describes the data, e.g. application/octet-stream for bytes"
	}
	return nil, x.refuse(http.StatusRequestEntityTooLarge, "body_too_large",
		fmt.Sprintf("codeforge proxy: API %q has method rules (%s), so the proxy reads %s for a _method override before it goes out, and it reads at most 1 MiB (%d bytes); this one is larger. To send it, %s.",
			x.rules.api.Name, x.ruleField(), what, maxBodyPeek, fix))
}

// peekedBody is a request body read ahead and put back.
type peekedBody struct {
	io.Reader
	io.Closer
}

// methodParams returns the values of every _method parameter in a query
// string or URL-encoded form, split on '&' and ';' (frameworks differ),
// with names matched as leniently as any framework reads them
// (isMethodName) and escapes decoded as PHP does (bad ones kept).
func methodParams(raw string) []string {
	var out []string
	for _, pair := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
		k, v, _ := strings.Cut(pair, "=")
		if isMethodName(unescapeLenient(k, true)) {
			out = append(out, unescapeLenient(v, true))
		}
	}
	return out
}

// isMethodName reports whether a parameter name reaches a framework as
// "_method": in any case, around white space, as an array ("_method[]"),
// and with the ' ', '.' and unmatched '[' that PHP turns into '_'.
func isMethodName(name string) bool {
	n := strings.ToLower(strings.TrimSpace(name))
	if i := strings.IndexByte(n, '['); i >= 0 && strings.IndexByte(n[i:], ']') >= 0 {
		n = n[:i]
	}
	n = strings.Map(func(r rune) rune {
		if r == ' ' || r == '.' || r == '[' {
			return '_'
		}
		return r
	}, n)
	return n == "_method"
}

// unescapeLenient decodes %XX escapes (and '+' as a space when plus),
// keeping malformed escapes as they are, like PHP's urldecode.
func unescapeLenient(s string, plus bool) string {
	if !strings.ContainsAny(s, "%+") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+' && plus:
			b.WriteByte(' ')
		case c == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]):
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// jsonMethods returns the value of every top-level "_method" key of a JSON
// object, duplicates included (PHP keeps the last, others the first).
// Nested keys are data: frameworks read _method only at the top level
// (Laravel through $request->request->get('_method')).
func jsonMethods(buf []byte) ([]string, string) {
	if !json.Valid(buf) {
		return nil, "its body is declared JSON but is not valid JSON"
	}
	dec := json.NewDecoder(bytes.NewReader(buf))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, "" // not an object: no top-level keys
	}
	var out []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, "its JSON body does not parse"
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, "its JSON body does not parse"
		}
		if !isMethodName(key) {
			continue
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return nil, fmt.Sprintf("its JSON body has a top-level %q that is not a string (%s)", key, truncate(string(v), 40))
		}
		out = append(out, s)
	}
	return out, ""
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// multipartMethods returns the content of every part whose name is
// _method (isMethodName), in any disposition and any spelling of the name
// parameter (quoted or not, RFC 2231, duplicated). A body that does not
// parse, a _method part with a Content-Transfer-Encoding, or a part
// header line that names _method where the parser saw no such part is
// refused: some upstream parser might read it differently.
func multipartMethods(buf []byte, boundary string) ([]string, string) {
	mr := multipart.NewReader(bytes.NewReader(buf), boundary)
	var out []string
	for {
		p, err := mr.NextRawPart()
		if err == io.EOF { // only the final delimiter; a wrapped EOF is a cut-off body
			break
		}
		if err != nil {
			return nil, fmt.Sprintf("its multipart body does not parse (%v)", err)
		}
		if !slices.ContainsFunc(dispositionNames(p.Header.Values("Content-Disposition")), isMethodName) {
			continue
		}
		switch cte := strings.ToLower(strings.TrimSpace(p.Header.Get("Content-Transfer-Encoding"))); cte {
		case "", "7bit", "8bit", "binary":
		default:
			return nil, fmt.Sprintf("its multipart _method part has Content-Transfer-Encoding %q, which upstream parsers decode differently", truncate(cte, 40))
		}
		v, err := io.ReadAll(p)
		if err != nil {
			return nil, fmt.Sprintf("its multipart body does not parse (%v)", err)
		}
		out = append(out, string(v))
	}
	// Cross-check: every header line naming _method must have been a part.
	raw := 0
	const cd = "content-disposition"
	for rest := buf; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		line = bytes.TrimLeft(line, " \t")
		if len(line) < len(cd) || !bytes.EqualFold(line[:len(cd)], []byte(cd)) {
			continue
		}
		name, value, ok := strings.Cut(strings.TrimSuffix(string(line), "\r"), ":")
		if ok && strings.EqualFold(strings.TrimSpace(name), cd) &&
			slices.ContainsFunc(dispositionNames([]string{value}), isMethodName) {
			raw++
		}
	}
	if raw > len(out) {
		return nil, "its multipart body has a Content-Disposition line naming _method that the proxy does not read as a part header"
	}
	return out, ""
}

// dispositionNames returns every name a Content-Disposition value may be
// read as: Go's parse (RFC 2231 and continuations decoded) and a lenient
// scan of each name= or name*= parameter, quoted or not.
func dispositionNames(values []string) []string {
	var out []string
	for _, v := range values {
		if _, params, err := mime.ParseMediaType(v); err == nil {
			if n, ok := params["name"]; ok {
				out = append(out, n)
			}
		}
		for _, seg := range strings.Split(v, ";") {
			k, val, ok := strings.Cut(seg, "=")
			if !ok {
				continue
			}
			k = strings.ToLower(strings.TrimSpace(k))
			if k != "name" && !strings.HasPrefix(k, "name*") {
				continue
			}
			val = strings.ReplaceAll(strings.Trim(strings.TrimSpace(val), `"`), `\`, "")
			if k != "name" {
				if i := strings.LastIndexByte(val, '\''); i >= 0 {
					val = val[i+1:]
				}
				val = unescapeLenient(val, false)
			}
			out = append(out, val)
		}
	}
	return out
}
