package apis

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/codeforge/codeforge/internal/testenv"
)

// writeTree creates files (path relative to dir -> content) under dir.
// A path ending in "/" creates a directory.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func envOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// cfg builds a config.json body around the given domains and extra fields.
func cfg(domains string, extra ...string) string {
	fields := append([]string{`"domains": ` + domains}, extra...)
	return "{\n  " + strings.Join(fields, ",\n  ") + "\n}\n"
}

func TestLoadRejects(t *testing.T) {
	t.Parallel()
	big := `{"description": "` + strings.Repeat("x", maxConfigSize) + `"}`
	tests := []struct {
		name  string
		files map[string]string
		env   map[string]string
		// want are substrings of the error; "@a" expands to the path of
		// <dir>/a/config.json, "@b" to <dir>/b/config.json.
		want []string
		// secret must not appear in the error.
		secret string
	}{
		{"empty domain list", map[string]string{"a/config.json": cfg(`[]`)},
			nil, []string{`@a: domains: required; list at least one host name`}, ""},
		{"missing domains", map[string]string{"a/config.json": `{"description": "x"}`},
			nil, []string{`@a: domains: required`}, ""},
		{"scheme", map[string]string{"a/config.json": cfg(`["api.x.com", "https://x.com"]`)},
			nil, []string{`@a: domains[1] "https://x.com": want a bare host name (no scheme, port, path or wildcard): remove the scheme, e.g. "x.com"`}, ""},
		{"path", map[string]string{"a/config.json": cfg(`["api.x.com/v1"]`)},
			nil, []string{`@a: domains[0] "api.x.com/v1": want a bare host name (no scheme, port, path or wildcard): remove the path, e.g. "api.x.com"`}, ""},
		{"port", map[string]string{"a/config.json": cfg(`["api.x.com:443"]`)},
			nil, []string{`@a: domains[0] "api.x.com:443": want a bare host name (no scheme, port, path or wildcard): remove the port, e.g. "api.x.com"`}, ""},
		{"wildcard", map[string]string{"a/config.json": cfg(`["*.x.com"]`)},
			nil, []string{`@a: domains[0] "*.x.com": want a bare host name (no scheme, port, path or wildcard): wildcards are not supported`}, ""},
		{"ipv4", map[string]string{"a/config.json": cfg(`["10.1.2.3"]`)},
			nil, []string{`@a: domains[0] "10.1.2.3": IP literals are not allowed`}, ""},
		{"ipv4 with port", map[string]string{"a/config.json": cfg(`["10.1.2.3:80"]`)},
			nil, []string{`@a: domains[0] "10.1.2.3:80": IP literals are not allowed`}, ""},
		{"ipv6", map[string]string{"a/config.json": cfg(`["::1", "[2001:db8::1]", "[::1]:443"]`)},
			nil, []string{
				`@a: domains[0] "::1": IP literals are not allowed`,
				`@a: domains[1] "[2001:db8::1]": IP literals are not allowed`,
				`@a: domains[2] "[::1]:443": IP literals are not allowed`,
			}, ""},
		{"short-form ipv4", map[string]string{"a/config.json": cfg(`["127.1", "0x7f000001", "a.b.1234"]`)},
			nil, []string{
				`@a: domains[0] "127.1": the last label is numeric`,
				`@a: domains[1] "0x7f000001": the last label is numeric`,
				`@a: domains[2] "a.b.1234": the last label is numeric`,
			}, ""},
		{"invalid host characters", map[string]string{"a/config.json": cfg(`["api_x.com", "api x.com", "bücher.de", ""]`)},
			nil, []string{
				`@a: domains[0] "api_x.com": invalid character '_'`,
				`@a: domains[1] "api x.com": invalid character ' '`,
				`@a: domains[2] "bücher.de": invalid character 'ü'; host names use letters, digits, '-' and '.' (write internationalised names in their xn-- punycode form)`,
				`@a: domains[3] "": empty; want a bare host name`,
			}, ""},
		{"bad labels", map[string]string{"a/config.json": cfg(`["a..b", ".a.com", "-a.com", "` + strings.Repeat("l", 64) + `.com"]`)},
			nil, []string{
				`@a: domains[0] "a..b": empty label`,
				`@a: domains[1] ".a.com": empty label`,
				`@a: domains[2] "-a.com": label "-a" starts or ends with '-'`,
				`is 64 characters; each dot-separated label has at most 63`,
			}, ""},
		{"duplicate domain after normalising", map[string]string{"a/config.json": cfg(`["API.x.com", "api.x.com."]`)},
			nil, []string{`@a: domains[1] "api.x.com.": duplicate of domains[0]`}, ""},
		{"bad token names", map[string]string{"a/config.json": cfg(`["a.com"]`,
			`"credentials": {"api_key": "abcdefgh", "ABC": "abcdefgh", "1ABC": "abcdefgh", "AB-CD": "abcdefgh"}`)},
			nil, []string{
				`@a: credentials: token name "api_key": want an upper-case letter followed by 3 to 127 upper-case letters, digits or '_' (^[A-Z][A-Z0-9_]{3,127}$), e.g. "API_KEY"`,
				`@a: credentials: token name "ABC": want`,
				`@a: credentials: token name "1ABC": want`,
				`@a: credentials: token name "AB-CD": want`,
			}, ""},
		{"empty token value", map[string]string{"a/config.json": cfg(`["a.com"]`, `"credentials": {"A_TOKEN": ""}`)},
			nil, []string{`@a: credentials.A_TOKEN: empty value`}, ""},
		{"short token value", map[string]string{"a/config.json": cfg(`["a.com"]`, `"credentials": {"A_TOKEN": "s3c"}`)},
			nil, []string{`@a: credentials.A_TOKEN: value is 3 characters; want at least 4`}, "s3c"},
		{"short env value", map[string]string{"a/config.json": cfg(`["a.com"]`, `"credentials": {"A_TOKEN": "${A_SECRET}"}`)},
			map[string]string{"A_SECRET": "zq"}, []string{`@a: credentials.A_TOKEN: value of $A_SECRET is 2 characters; want at least 4`}, ""},
		{"value contains its own token name", map[string]string{"a/config.json": cfg(`["a.com"]`, `"credentials": {"A_TOKEN": "xxA_TOKENxx"}`)},
			nil, []string{`@a: credentials.A_TOKEN: the secret value contains the token name "A_TOKEN" (API "a")`}, "xxA_TOKENxx"},
		{"value contains another API's token name", map[string]string{
			"a/config.json": cfg(`["a.com"]`, `"credentials": {"A_TOKEN": "${A_SECRET}"}`),
			"b/config.json": cfg(`["b.com"]`, `"credentials": {"B_TOKEN": "bbbbbbbb"}`),
		}, map[string]string{"A_SECRET": "sk_B_TOKEN_9"}, []string{`@a: credentials.A_TOKEN: the secret value contains the token name "B_TOKEN" (API "b")`}, "sk_B_TOKEN_9"},
		{"value with white space or newline", map[string]string{"a/config.json": cfg(`["a.com"]`,
			`"credentials": {"A_TOKEN": " padded-secret", "B_TOKEN": "two\nlines"}`)},
			nil, []string{
				`@a: credentials.A_TOKEN: value has leading or trailing white space`,
				`@a: credentials.B_TOKEN: value contains a control character`,
			}, "padded-secret"},
		{"partial env reference", map[string]string{"a/config.json": cfg(`["a.com"]`,
			`"credentials": {"A_TOKEN": "Bearer ${A_SECRET}", "B_TOKEN": "${1BAD}"}`)},
			map[string]string{"A_SECRET": "s3cret-value"}, []string{
				`@a: credentials.A_TOKEN: the value contains "${" but is not exactly "${NAME}"`,
				`@a: credentials.B_TOKEN: the value contains "${" but is not exactly "${NAME}"`,
			}, "s3cret-value"},
		{"env variable missing", map[string]string{"a/config.json": cfg(`["a.com"]`, `"credentials": {"A_TOKEN": "${A_SECRET}"}`)},
			nil, []string{`@a: credentials.A_TOKEN: environment variable A_SECRET is not set (the value is "${A_SECRET}"); set it in the environment or in .env`}, ""},
		{"env variable empty", map[string]string{"a/config.json": cfg(`["a.com"]`, `"credentials": {"A_TOKEN": "${A_SECRET}"}`)},
			map[string]string{"A_SECRET": ""}, []string{`@a: credentials.A_TOKEN: environment variable A_SECRET is empty`}, ""},
		{"env variable missing for an inactive API", map[string]string{"a/config.json": cfg(`["a.com"]`, `"credentials": {"A_TOKEN": "${A_SECRET}"}`, `"active": false`)},
			nil, []string{`@a: credentials.A_TOKEN: environment variable A_SECRET is not set`}, ""},
		{"token name used twice", map[string]string{
			"a/config.json": cfg(`["a.com"]`, `"credentials": {"SHARED_TOKEN": "aaaaaaaa"}`),
			"b/config.json": cfg(`["b.com"]`, `"credentials": {"SHARED_TOKEN": "bbbbbbbb"}`, `"active": false`),
		}, nil, []string{`@b: credentials.SHARED_TOKEN: token name already used by API "a" (@a); token names must be unique across all APIs`}, ""},
		{"token name inside another", map[string]string{
			"a/config.json": cfg(`["a.com"]`, `"credentials": {"STRIPE_KEY": "aaaaaaaa"}`),
			"b/config.json": cfg(`["b.com"]`, `"credentials": {"STRIPE_KEY_LIVE": "bbbbbbbb"}`),
		}, nil, []string{`@a: credentials.STRIPE_KEY: token name is part of token name "STRIPE_KEY_LIVE" (API "b", @b); no token name may contain another`}, ""},
		{"token name inside another in one API", map[string]string{
			"a/config.json": cfg(`["a.com"]`, `"credentials": {"KEY_ONE": "aaaaaaaa", "MY_KEY_ONE": "bbbbbbbb"}`),
		}, nil, []string{`@a: credentials.KEY_ONE: token name is part of token name "MY_KEY_ONE" (API "a", @a)`}, ""},
		{"two APIs claim a host", map[string]string{
			"a/config.json": cfg(`["api.x.com"]`),
			"b/config.json": cfg(`["API.X.COM."]`, `"active": false`),
		}, nil, []string{`@b: domains: "api.x.com" is already claimed by API "a" (@a); a host may belong to one API only`}, ""},
		{"unknown method", map[string]string{"a/config.json": cfg(`["a.com"]`, `"restricted_methods": ["delete", "FETCH"]`)},
			nil, []string{`@a: restricted_methods[1] "FETCH": unknown HTTP method; want one of CONNECT, DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT, TRACE`}, ""},
		{"duplicate method", map[string]string{"a/config.json": cfg(`["a.com"]`, `"restricted_methods": ["get", "GET"]`)},
			nil, []string{`@a: restricted_methods[1] "GET": duplicate of restricted_methods[0]`}, ""},
		{"restricted and allowed methods together", map[string]string{"a/config.json": cfg(`["a.com"]`, `"restricted_methods": ["DELETE"]`, `"allowed_methods": ["GET"]`)},
			nil, []string{`@a: restricted_methods and allowed_methods: set one or the other, not both`}, ""},
		{"empty allowed methods", map[string]string{"a/config.json": cfg(`["a.com"]`, `"allowed_methods": []`)},
			nil, []string{`@a: allowed_methods: empty list would refuse every request`}, ""},
		{"unknown allowed method", map[string]string{"a/config.json": cfg(`["a.com"]`, `"allowed_methods": ["GET", "get", "BREW"]`)},
			nil, []string{`@a: allowed_methods[1] "get": duplicate of allowed_methods[0]`, `@a: allowed_methods[2] "BREW": unknown HTTP method`}, ""},
		{"unknown substitution place", map[string]string{"a/config.json": cfg(`["a.com"]`, `"substitute_in": ["headers", "cookies", "Body", "body"]`)},
			nil, []string{`@a: substitute_in[1] "cookies": unknown place; want one of headers, query, path, body`, `@a: substitute_in[3] "body": duplicate of substitute_in[2]`}, ""},
		{"substitution place not a string", map[string]string{"a/config.json": cfg(`["a.com"]`, `"substitute_in": "body"`)},
			nil, []string{`@a: substitute_in: want an array of strings, got a string`}, ""},
		{"bad ports", map[string]string{"a/config.json": cfg(`["a.com"]`, `"ports": [443, 0, 70000, 8.5, "8443", 443]`)},
			nil, []string{
				`@a: ports[1]: 0 at line 3, column 18 is not a TCP port; want a whole number from 1 to 65535`,
				`@a: ports[2]: 70000 at`, `@a: ports[3]: 8.5 at`,
				`@a: ports[4]: want a port number, got a string`,
			}, ""},
		{"duplicate port", map[string]string{"a/config.json": cfg(`["a.com"]`, `"ports": [443, 8443, 443]`)},
			nil, []string{`@a: ports[2] 443: duplicate of ports[0]`}, ""},
		{"empty ports", map[string]string{"a/config.json": cfg(`["a.com"]`, `"ports": []`)},
			nil, []string{`@a: ports: empty list would let credentials go nowhere`}, ""},
		{"bad reference", map[string]string{"a/config.json": cfg(`["a.com"]`, `"reference": "docs.a.com/api"`)},
			nil, []string{`@a: reference "docs.a.com/api": want an absolute http(s) URL`}, ""},
		{"non-http reference", map[string]string{"a/config.json": cfg(`["a.com"]`, `"reference": "ftp://a.com/"`)},
			nil, []string{`@a: reference "ftp://a.com/": want an absolute http(s) URL`}, ""},
		{"unknown field", map[string]string{"a/config.json": "{\n  \"domain\": [\"a.com\"]\n}"},
			nil, []string{`@a: unknown field "domain" at line 2, column 3 (did you mean "domains"?); known fields: description, domains, credentials, reference, restricted_methods, allowed_methods, substitute_in, ports, active`}, ""},
		{"field name in wrong case", map[string]string{"a/config.json": `{"Domains": ["a.com"]}`},
			nil, []string{`@a: unknown field "Domains" at line 1, column 2 (did you mean "domains"?)`}, ""},
		{"duplicate key", map[string]string{"a/config.json": "{\"domains\": [\"a.com\"],\n\"domains\": [\"b.com\"]}"},
			nil, []string{`@a: domains: duplicate key at line 2, column 1 (first at line 1, column 2); keep one`}, ""},
		{"duplicate credential key", map[string]string{"a/config.json": cfg(`["a.com"]`, `"credentials": {"A_TOKEN": "aaaaaaaa", "A_TOKEN": "bbbbbbbb"}`)},
			nil, []string{`@a: credentials.A_TOKEN: duplicate key at line 3`}, ""},
		{"null value", map[string]string{"a/config.json": cfg(`["a.com"]`, `"active": null`)},
			nil, []string{`@a: active: null at line 3, column 13; want true or false (leave the field out to use its default)`}, ""},
		{"wrong types", map[string]string{"a/config.json": `{"domains": "a.com", "description": 5, "active": "yes", "restricted_methods": [1], "credentials": {"A_TOKEN": 12345}}`},
			nil, []string{
				`@a: domains: want an array of strings, got a string`,
				`@a: description: want a string, got a number`,
				`@a: active: want true or false, got a string`,
				`@a: restricted_methods[0]: want a string, got a number`,
				`@a: credentials.A_TOKEN: want a string, got a number`,
			}, ""},
		// A secret written where another type belongs is named by its type,
		// never quoted: the message goes to logs and to the agent.
		{"secret in place of the credentials object", map[string]string{"a/config.json": cfg(`["a.com"]`, `"credentials": "sk_live_51HbQzq"`)},
			nil, []string{`@a: credentials: want an object whose values are strings, got a string at line 3`}, "sk_live_51HbQzq"},
		{"secret as a number", map[string]string{"a/config.json": cfg(`["a.com"]`, `"credentials": {"A_TOKEN": 4242424242424242}`)},
			nil, []string{`@a: credentials.A_TOKEN: want a string, got a number at line 3`}, "4242424242424242"},
		{"secret as an unknown field's value", map[string]string{"a/config.json": cfg(`["a.com"]`, `"api_key": "sk_live_51HbQzq"`)},
			nil, []string{`@a: unknown field "api_key" at line 3`}, "sk_live_51HbQzq"},
		{"trailing object", map[string]string{"a/config.json": cfg(`["a.com"]`) + "{}"},
			nil, []string{`@a: trailing data after the JSON object at line 4, column 1 (an object); a config file holds exactly one object`}, ""},
		{"trailing garbage", map[string]string{"a/config.json": cfg(`["a.com"]`) + "x"},
			nil, []string{`@a: invalid JSON at line 4, column 1: invalid character 'x' after top-level value`}, ""},
		{"malformed JSON", map[string]string{"a/config.json": "{\n  \"domains\": [\"a.com\",]\n}"},
			nil, []string{`@a: invalid JSON at line 2, column 23: invalid character ']' looking for beginning of value`}, ""},
		{"truncated JSON", map[string]string{"a/config.json": `{"domains": ["a.com"`},
			nil, []string{`@a: invalid JSON: unexpected end of file`}, ""},
		{"invalid UTF-8", map[string]string{"a/config.json": cfg(`["a.com"]`, "\"credentials\": {\"A_TOKEN\": \"ab\xffcd\"}")},
			nil, []string{`@a: not valid UTF-8`}, ""},
		{"empty file", map[string]string{"a/config.json": "\n"},
			nil, []string{`@a: file is empty; want a JSON object`}, ""},
		{"top-level array", map[string]string{"a/config.json": `["a.com"]`},
			nil, []string{`@a: want a JSON object at the top level, got an array`}, ""},
		{"deeply nested unknown field", map[string]string{"a/config.json": `{"x": ` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`},
			nil, []string{`@a: unknown field "x"`, `nesting deeper than 64 levels`}, ""},
		{"oversized file", map[string]string{"a/config.json": big},
			nil, []string{`@a: larger than 1048576 bytes`}, ""},
		{"bad API name", map[string]string{"Stripe/config.json": cfg(`["a.com"]`)},
			nil, []string{`Stripe/config.json: API name "Stripe" (the directory name): want lower-case letters`}, ""},
		{"directory without config", map[string]string{"a/config.JSON": cfg(`["a.com"]`), "a/types.d.ts": ""},
			nil, []string{`/a: no config.json in this API directory (found config.JSON; the file must be named exactly config.json)`}, ""},
		{"types.d.ts not a file", map[string]string{"a/config.json": cfg(`["a.com"]`), "a/types.d.ts/": ""},
			nil, []string{`/a/types.d.ts: not a regular file`}, ""},
		{"errors of several files at once", map[string]string{
			"a/config.json": cfg(`["https://a.com"]`),
			"b/config.json": cfg(`["b.com"]`, `"bogus": 1`),
		}, nil, []string{`@a: domains[0] "https://a.com"`, `@b: unknown field "bogus"`}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeTree(t, dir, tc.files)
			set, err := Load(dir, envOf(tc.env))
			if err == nil {
				t.Fatalf("Load succeeded with %d APIs; want an error", len(set.All()))
			}
			if set != nil {
				t.Errorf("Load returned a Set alongside an error")
			}
			msg := err.Error()
			for _, w := range tc.want {
				w = strings.ReplaceAll(w, "@a", filepath.Join(dir, "a", "config.json"))
				w = strings.ReplaceAll(w, "@b", filepath.Join(dir, "b", "config.json"))
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
			if tc.secret != "" && strings.Contains(msg, tc.secret) {
				t.Errorf("error reveals the secret value %q:\n%s", tc.secret, msg)
			}
		})
	}
}

func TestLoadAccepts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"stripe/config.json": `{
			"description": "  Stripe payments  ",
			"domains": ["API.Stripe.com.", "files.stripe.com"],
			"credentials": {"STRIPE_AUTH_TOKEN": "${STRIPE_SECRET_KEY}", "STRIPE_ACCOUNT": "acct_literal"},
			"reference": "https://docs.stripe.com/api",
			"restricted_methods": ["delete", "Put"]
		}`,
		"bom/config.json":             "\xef\xbb\xbf" + cfg(`["bom.example.net"]`),
		"opted/config.json":           cfg(`["opted.example.net"]`, `"substitute_in": ["Body", "query", "headers", "path"]`, `"ports": [8443, 443]`, `"allowed_methods": ["get", "HEAD"]`),
		"stripe/types.d.ts":           "export {};\n",
		"off/config.json":             cfg(`["off.example.net"]`, `"active": false`),
		"example/config.json.example": "not even JSON",
		"README.md":                   "plain files are ignored",
		".hidden/config.json":         "not JSON either",
		".git/":                       "",
	})
	set, err := Load(dir, envOf(map[string]string{"STRIPE_SECRET_KEY": "sk_test_123"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := names(set.All()); !slices.Equal(got, []string{"bom", "off", "opted", "stripe"}) {
		t.Fatalf("All() = %v", got)
	}
	s, ok := set.Get("stripe")
	if !ok {
		t.Fatal(`Get("stripe") not found`)
	}
	if s.Description != "Stripe payments" {
		t.Errorf("Description = %q", s.Description)
	}
	if !slices.Equal(s.Domains, []string{"api.stripe.com", "files.stripe.com"}) {
		t.Errorf("Domains = %v", s.Domains)
	}
	if s.Credentials["STRIPE_AUTH_TOKEN"] != "sk_test_123" || s.Credentials["STRIPE_ACCOUNT"] != "acct_literal" {
		t.Errorf("Credentials not resolved: %d entries", len(s.Credentials))
	}
	if !slices.Equal(s.TokenNames(), []string{"STRIPE_ACCOUNT", "STRIPE_AUTH_TOKEN"}) {
		t.Errorf("TokenNames() = %v", s.TokenNames())
	}
	if !slices.Equal(s.RestrictedMethods, []string{"DELETE", "PUT"}) {
		t.Errorf("RestrictedMethods = %v", s.RestrictedMethods)
	}
	if !s.Active {
		t.Error("Active defaulted to false")
	}
	// The safe defaults: credentials in headers only, to port 443 only.
	if !slices.Equal(s.SubstituteIn, []string{"headers"}) || !slices.Equal(s.Ports, []int{443}) || s.AllowedMethods != nil {
		t.Errorf("defaults: SubstituteIn=%v Ports=%v AllowedMethods=%v", s.SubstituteIn, s.Ports, s.AllowedMethods)
	}
	if s.SubstitutesIn("body") || !s.SubstitutesIn("headers") || !s.AllowsPort(443) || s.AllowsPort(80) {
		t.Error("SubstitutesIn/AllowsPort disagree with the defaults")
	}
	if s.MethodAllowed("DELETE") || !s.MethodAllowed("GET") || !s.HasMethodRules() {
		t.Error("MethodAllowed disagrees with restricted_methods")
	}
	if s.Reference != "https://docs.stripe.com/api" {
		t.Errorf("Reference = %q", s.Reference)
	}
	if want := filepath.Join(dir, "stripe", "types.d.ts"); s.TypesPath != want {
		t.Errorf("TypesPath = %q, want %q", s.TypesPath, want)
	}
	if want := filepath.Join(dir, "stripe", "config.json"); s.ConfigPath != want {
		t.Errorf("ConfigPath = %q, want %q", s.ConfigPath, want)
	}
	opted, _ := set.Get("opted")
	if !slices.Equal(opted.SubstituteIn, []string{"body", "headers", "path", "query"}) || !slices.Equal(opted.Ports, []int{443, 8443}) ||
		!slices.Equal(opted.AllowedMethods, []string{"GET", "HEAD"}) {
		t.Errorf("opted: SubstituteIn=%v Ports=%v AllowedMethods=%v", opted.SubstituteIn, opted.Ports, opted.AllowedMethods)
	}
	if opted.MethodAllowed("POST") || !opted.MethodAllowed("HEAD") || !opted.SubstitutesIn("body") || !opted.AllowsPort(8443) {
		t.Error("opted: allowed_methods, substitute_in or ports not applied")
	}
	off := set.All()[1]
	if off.Active || off.TypesPath != "" {
		t.Errorf("off: Active=%v TypesPath=%q", off.Active, off.TypesPath)
	}
}

func TestLoadRelativeDirIsAbsolutised(t *testing.T) {
	// Not parallel: changes the working directory.
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a/config.json": cfg(`["a.com"]`)})
	t.Chdir(dir)
	set, err := Load(".", envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := set.Get("a")
	if !filepath.IsAbs(a.ConfigPath) {
		t.Errorf("ConfigPath %q is not absolute", a.ConfigPath)
	}
	writeTree(t, dir, map[string]string{"b/config.json": cfg(`["https://b.com"]`)})
	_, err = Load(".", envOf(nil))
	if err == nil || !strings.HasPrefix(err.Error(), `b/config.json: domains[0] "https://b.com"`) {
		t.Errorf("error does not name the file as the caller spelt it: %v", err)
	}
}

func TestLoadMissingDir(t *testing.T) {
	t.Parallel()
	set, err := Load(filepath.Join(t.TempDir(), "nope"), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if len(set.All()) != 0 || len(set.Names()) != 0 {
		t.Errorf("missing dir gave APIs: %v", set.Names())
	}
	got, err := set.Resolve(nil)
	if err != nil || len(got) != 0 {
		t.Errorf("Resolve(nil) = %v, %v", got, err)
	}
}

func TestLoadDirIsAFile(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "apis")
	writeTree(t, filepath.Dir(f), map[string]string{"apis": "x"})
	if _, err := Load(f, envOf(nil)); err == nil || !strings.Contains(err.Error(), "read APIs directory") {
		t.Errorf("Load(file) = %v; want a read error", err)
	}
}

func TestShippedExampleIsValid(t *testing.T) {
	t.Parallel()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(filepath.Join(root, "apis", "example", "config.json.example"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"example/config.json": string(example)})
	set, err := Load(dir, envOf(map[string]string{"EXAMPLE_API_KEY": "ex_live_0123"}))
	if err != nil {
		t.Fatalf("the shipped example does not load: %v", err)
	}
	a, ok := set.Get("example")
	if !ok || a.Credentials["EXAMPLE_AUTH_TOKEN"] != "ex_live_0123" {
		t.Fatalf("example API not loaded with its credential: %+v", a)
	}
	// And without the variable the error says which one is missing.
	_, err = Load(dir, envOf(nil))
	if err == nil || !strings.Contains(err.Error(), "environment variable EXAMPLE_API_KEY is not set") {
		t.Errorf("want a missing EXAMPLE_API_KEY error, got %v", err)
	}
	// The repository's own apis/ directory (only the template) loads empty.
	set, err = Load(filepath.Join(root, "apis"), envOf(nil))
	if err != nil || len(set.All()) != 0 {
		t.Errorf("repo apis/ = %v, %v; want empty", names(set.All()), err)
	}
}

func names(apis []*API) []string {
	var out []string
	for _, a := range apis {
		out = append(out, a.Name)
	}
	return out
}

func loadSet(t *testing.T) *Set {
	t.Helper()
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"github/config.json":  cfg(`["api.github.com", "uploads.github.com"]`),
		"stripe/config.json":  cfg(`["api.stripe.com"]`, `"credentials": {"STRIPE_AUTH_TOKEN": "sk_test_abcd"}`),
		"retired/config.json": cfg(`["old.example.org"]`, `"active": false`),
	})
	set, err := Load(dir, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func TestSetActiveFiltering(t *testing.T) {
	t.Parallel()
	set := loadSet(t)
	if got := names(set.All()); !slices.Equal(got, []string{"github", "retired", "stripe"}) {
		t.Errorf("All() = %v", got)
	}
	if got := names(set.Active()); !slices.Equal(got, []string{"github", "stripe"}) {
		t.Errorf("Active() = %v", got)
	}
	if got := set.Names(); !slices.Equal(got, []string{"github", "stripe"}) {
		t.Errorf("Names() = %v", got)
	}
	if _, ok := set.Get("retired"); ok {
		t.Error(`Get("retired") found an inactive API`)
	}
	if a := set.ForHost("old.example.org"); a != nil {
		t.Errorf(`ForHost("old.example.org") = %q; want nil for an inactive API`, a.Name)
	}
	// The returned slices are copies: changing them does not change the Set.
	all := set.All()
	all[0] = nil
	if set.All()[0] == nil {
		t.Error("All() exposes the Set's own slice")
	}
}

func TestSetForHost(t *testing.T) {
	t.Parallel()
	set := loadSet(t)
	tests := []struct{ host, want string }{
		{"api.github.com", "github"},
		{"API.GitHub.com", "github"},
		{"uploads.github.com:443", "github"},
		{"api.stripe.com.", "stripe"},
		{"api.stripe.com.:8443", "stripe"},
		{"evil.api.stripe.com", ""},
		{"stripe.com", ""},
		{"api.stripe.com.evil.net", ""},
		{"[::1]:443", ""},
		{"", ""},
	}
	for _, tc := range tests {
		got := ""
		if a := set.ForHost(tc.host); a != nil {
			got = a.Name
		}
		if got != tc.want {
			t.Errorf("ForHost(%q) = %q, want %q", tc.host, got, tc.want)
		}
	}
}

func TestSetResolve(t *testing.T) {
	t.Parallel()
	set := loadSet(t)
	tests := []struct {
		in      []string
		want    []string
		wantErr string
	}{
		{nil, []string{"github", "stripe"}, ""},
		{[]string{}, []string{"github", "stripe"}, ""},
		{[]string{"stripe"}, []string{"stripe"}, ""},
		{[]string{"stripe", "github", "stripe"}, []string{"github", "stripe"}, ""},
		{[]string{"x"}, nil, `unknown API "x"; valid: github, stripe`},
		{[]string{"retired"}, nil, `API "retired" is inactive; valid: github, stripe`},
		{[]string{"github", "Stripe", "x", "x"}, nil, `unknown API "Stripe", unknown API "x"; valid: github, stripe`},
	}
	for _, tc := range tests {
		got, err := set.Resolve(tc.in)
		if tc.wantErr != "" {
			if err == nil || err.Error() != tc.wantErr {
				t.Errorf("Resolve(%q) error = %v, want %q", tc.in, err, tc.wantErr)
			}
			if got != nil {
				t.Errorf("Resolve(%q) returned APIs with an error", tc.in)
			}
			continue
		}
		if err != nil || !slices.Equal(names(got), tc.want) {
			t.Errorf("Resolve(%q) = %v, %v; want %v", tc.in, names(got), err, tc.want)
		}
	}
	if got := Domains(set.Active()); !slices.Equal(got, []string{"api.github.com", "api.stripe.com", "uploads.github.com"}) {
		t.Errorf("Domains = %v", got)
	}
	if got := Domains(nil); len(got) != 0 {
		t.Errorf("Domains(nil) = %v", got)
	}
}

func TestResolveWithNoActiveAPIs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a/config.json": cfg(`["a.com"]`, `"active": false`)})
	set, err := Load(dir, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	_, err = set.Resolve([]string{"a"})
	if err == nil || err.Error() != `API "a" is inactive; valid: none (no active APIs are configured)` {
		t.Errorf("Resolve = %v", err)
	}
}

func TestNilSet(t *testing.T) {
	t.Parallel()
	var s *Set
	if s.All() != nil || s.Active() != nil || s.Names() != nil || s.ForHost("a.com") != nil {
		t.Error("nil Set is not empty")
	}
	if _, ok := s.Get("a"); ok {
		t.Error("nil Set found an API")
	}
	if _, err := s.Resolve([]string{"a"}); err == nil || !strings.Contains(err.Error(), `unknown API "a"`) {
		t.Errorf("nil Set Resolve = %v", err)
	}
}

func TestLoadNamesReadsNoSecret(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"stripe/config.json": `{
			"domains": ["api.stripe.com"],
			"credentials": {"STRIPE_AUTH_TOKEN": "${STRIPE_SECRET_KEY}", "STRIPE_ACCOUNT": "acct_literal_value"},
			"restricted_methods": ["DELETE"]
		}`,
	})
	// The variable is unset: Load must fail, LoadNames must not need it.
	if _, err := Load(dir, envOf(nil)); err == nil {
		t.Fatal("Load without the variable: no error")
	}
	set, err := LoadNames(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, ok := set.Get("stripe")
	if !ok {
		t.Fatal(`Get("stripe") not found`)
	}
	if got := s.TokenNames(); !slices.Equal(got, []string{"STRIPE_ACCOUNT", "STRIPE_AUTH_TOKEN"}) {
		t.Errorf("token names %v", got)
	}
	for token, value := range s.Credentials {
		if value != "" {
			t.Errorf("credentials.%s holds %q; LoadNames must hold no value", token, value)
		}
	}
	if !slices.Equal(s.RestrictedMethods, []string{"DELETE"}) || !slices.Equal(s.Domains, []string{"api.stripe.com"}) {
		t.Errorf("domains %v, restricted %v", s.Domains, s.RestrictedMethods)
	}
	// Everything but the values is still validated.
	bad := t.TempDir()
	writeTree(t, bad, map[string]string{"x/config.json": `{"domains": ["https://x.example"], "credentials": {"x": "${X}"}}`})
	_, err = LoadNames(bad)
	if err == nil || !strings.Contains(err.Error(), "domains[0]") || !strings.Contains(err.Error(), `token name "x"`) {
		t.Errorf("LoadNames of a bad config: %v; want the domain and token name problems", err)
	}
	if _, err := Load(dir, nil); err == nil || !strings.Contains(err.Error(), "LoadNames") {
		t.Errorf("Load with nil getenv: %v; want an error pointing at LoadNames", err)
	}
}

// TestLoadEveryPort loads a config listing every TCP port: decoding stays
// linear in the file's size (positions are only counted for messages; the
// first version counted lines for every token and took minutes here).
func TestLoadEveryPort(t *testing.T) {
	t.Parallel()
	ports := make([]string, 65535)
	for i := range ports {
		ports[i] = strconv.Itoa(i + 1)
	}
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"a/config.json": cfg(`["a.com"]`, `"ports": [`+strings.Join(ports, ",")+`]`)})
	set, err := Load(dir, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	a, _ := set.Get("a")
	if len(a.Ports) != 65535 || !a.AllowsPort(1) || !a.AllowsPort(65535) {
		t.Errorf("loaded %d ports", len(a.Ports))
	}
}
