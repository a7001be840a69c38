package proxy

import (
	"bytes"
	"mime/multipart"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// FuzzMethodParsers checks the body readers against Go's own parsers: any
// _method that net/url or mime/multipart find, the proxy's lenient readers
// find too (or refuse the body), and no input makes them panic.
func FuzzMethodParsers(f *testing.F) {
	f.Add([]byte("a=1&_method=DELETE"), bnd)
	f.Add([]byte("%5Fmethod=PUT;x=%zz&_METHOD[]=patch"), bnd)
	f.Add(multipartBody(bnd, "\r\n", true, field("_method", "DELETE"), field("a", "1")), bnd)
	f.Add(multipartBody(bnd, "\n", true, part{[]string{"Content-Disposition: form-data; name*=UTF-8''%5Fmethod"}, "DELETE"}), bnd)
	f.Add(multipartBody("AAAA", "\r\n", false, field("_method", "x")), "AAAA")
	f.Add([]byte(`{"_method":"DELETE","a":{"_method":1},"_method":null}`), bnd)
	f.Fuzz(func(t *testing.T, body []byte, boundary string) {
		got := methodParams(string(body))
		if q, err := url.ParseQuery(string(body)); err == nil {
			for _, v := range q["_method"] {
				if !slices.Contains(got, v) {
					t.Errorf("net/url finds _method=%q in %q; methodParams found %q", v, body, got)
				}
			}
		}
		_, _ = jsonMethods(body)
		if boundary == "" || len(boundary) > 70 || strings.Trim(boundary, boundaryChars) != "" {
			return
		}
		got, problem := multipartMethods(body, boundary)
		if problem != "" {
			return
		}
		form, err := multipart.NewReader(bytes.NewReader(body), boundary).ReadForm(1 << 20)
		if err != nil {
			return
		}
		defer form.RemoveAll()
		for name, vs := range form.Value {
			if !strings.EqualFold(name, "_method") {
				continue
			}
			for _, v := range vs {
				if !slices.Contains(got, v) {
					t.Errorf("mime/multipart finds %s=%q in %q; multipartMethods found %q", name, v, body, got)
				}
			}
		}
	})
}
