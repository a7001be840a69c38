package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// methodOverrides are the headers frameworks read to turn a POST into
// another method; restricted methods are checked against them too.
var methodOverrides = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// checkMethod refuses a restricted method, also when it is asked for
// through an override header, a _method query parameter or a _method field
// of a URL-encoded form body.
func (x *exchange) checkMethod() *http.Response {
	if x.rules == nil || len(x.rules.restricted) == 0 {
		return nil
	}
	asked := []string{x.in.Method}
	for _, h := range methodOverrides {
		for _, v := range x.in.Header.Values(h) {
			asked = append(asked, strings.Split(v, ",")...)
		}
	}
	asked = append(asked, methodParams(x.in.URL.RawQuery)...)
	form, err := x.peekForm()
	if err != nil {
		return x.refuse(http.StatusRequestEntityTooLarge, "form_too_large", "codeforge proxy: "+err.Error())
	}
	asked = append(asked, methodParams(form)...)
	for _, m := range asked {
		m = strings.ToUpper(strings.TrimSpace(m))
		if !slices.Contains(x.rules.restricted, m) {
			continue
		}
		api := x.rules.api.Name
		x.log.Info("restrict", "host", x.t.display(), "api", api, "method", m)
		body, _ := json.Marshal(map[string]string{
			"error":  "method_restricted",
			"method": m,
			"host":   x.t.display(),
			"api":    api,
			"message": fmt.Sprintf("%s requests to %s are blocked by the restricted_methods of API %q. "+
				"This is a permanent configuration restriction, not a temporary error: do not retry, and do not try another way around it; "+
				"if the user needs it, they must change apis/%s/config.json.", m, x.t.display(), api, api),
		})
		resp := synthetic(x.in, http.StatusForbidden, "method_restricted", "application/json", string(body)+"\n")
		x.finishBlocked(resp.StatusCode, "method_restricted")
		return resp
	}
	return nil
}

// methodParams returns the values of every _method parameter in a query
// string or URL-encoded form, split on '&' and ';' (frameworks differ) and
// unescaped leniently, so no spelling the upstream accepts slips past.
func methodParams(raw string) []string {
	var out []string
	for _, pair := range strings.FieldsFunc(raw, func(r rune) bool { return r == '&' || r == ';' }) {
		k, v, _ := strings.Cut(pair, "=")
		if uk, err := url.QueryUnescape(k); err == nil {
			k = uk
		}
		if !strings.EqualFold(strings.TrimSpace(k), "_method") {
			continue
		}
		if uv, err := url.QueryUnescape(v); err == nil {
			v = uv
		}
		out = append(out, v)
	}
	return out
}

// maxFormPeek bounds how much of a URL-encoded form body is read to look
// for a _method field.
const maxFormPeek = 1 << 20

// peekForm reads a URL-encoded form body (bounded) so checkMethod can see
// its _method field, and puts it back in front of the rest of the body.
func (x *exchange) peekForm() (string, error) {
	in := x.in
	if in.Body == nil || in.Body == http.NoBody {
		return "", nil
	}
	ct := strings.ToLower(in.Header.Get("Content-Type"))
	if !strings.HasPrefix(strings.TrimSpace(ct), "application/x-www-form-urlencoded") {
		return "", nil
	}
	buf, err := io.ReadAll(io.LimitReader(in.Body, maxFormPeek+1))
	if err != nil {
		return "", fmt.Errorf("read form body: %w", err)
	}
	if len(buf) > maxFormPeek {
		return "", fmt.Errorf("a URL-encoded form body to %s over %d bytes cannot be checked for a _method override; send it as JSON or in parts", x.t.display(), maxFormPeek)
	}
	in.Body = readCloser{io.MultiReader(bytes.NewReader(buf), in.Body), in.Body}
	return string(buf), nil
}
