package apis

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/codeforge/codeforge/internal/strictjson"
)

// Config is the on-disk form of apis/<name>/config.json. It is decoded
// strictly: unknown or misspelt fields, duplicate keys, null values, wrong
// types and trailing data are errors that name the file and the field.
//
// Example:
//
//	{
//	  "description": "Stripe payments API",
//	  "domains": ["api.stripe.com", "files.stripe.com"],
//	  "credentials": {"STRIPE_AUTH_TOKEN": "${STRIPE_SECRET_KEY}"},
//	  "reference": "https://docs.stripe.com/api",
//	  "restricted_methods": ["DELETE"],
//	  "active": true
//	}
type Config struct {
	// Description says in a sentence what the API is for; list_apis shows
	// it to the agent. Optional.
	Description string `json:"description"`

	// Domains are the exact host names the API is served from. Required,
	// at least one. Each is a bare host name: no scheme, port, path,
	// wildcard or IP literal. Upper case is folded to lower case and a
	// trailing dot is dropped. A host belongs to at most one API (active or
	// not), so every secret has one unambiguous owner. Credentials are only
	// ever sent to these hosts; without YOLO mode they are also the only
	// hosts the sandbox may reach when the API is selected.
	Domains []string `json:"domains"`

	// Credentials maps a token name to its secret value. Sandbox code
	// writes the token name (e.g. "Bearer STRIPE_AUTH_TOKEN"); the proxy
	// puts the value in its place on the way to this API's hosts and puts
	// the name back in responses. Optional.
	//
	// Token names match ^[A-Z][A-Z0-9_]{3,127}$, are unique across all
	// APIs, and no token name may be part of another (STRIPE_KEY and
	// STRIPE_KEY_2 clash), or substitution would be ambiguous.
	//
	// A value of exactly the form "${NAME}" is read from the environment
	// variable NAME (which may come from .env), so no secret needs to sit
	// in the file; a missing or empty variable is an error. Values must be
	// at least 4 characters, must not contain any token name, control
	// characters or leading/trailing white space, and must not contain
	// "${" other than as a whole-value reference.
	Credentials map[string]string `json:"credentials"`

	// Reference is an absolute http(s) URL of the API's documentation,
	// shown by list_apis. Optional.
	Reference string `json:"reference"`

	// RestrictedMethods are HTTP methods the proxy refuses on this API's
	// hosts with a permanent 403 (e.g. ["DELETE", "PUT"]). Standard methods
	// only (GET, HEAD, POST, PUT, PATCH, DELETE, CONNECT, OPTIONS, TRACE),
	// any case, stored upper case. Optional.
	RestrictedMethods []string `json:"restricted_methods"`

	// AllowedMethods, when set, are the only HTTP methods the proxy lets
	// through to this API's hosts; every other method, and every method
	// override naming one, gets the same permanent 403. It is the stronger
	// form of RestrictedMethods (a deny-list misses the override nobody
	// thought of) and cannot be combined with it. Same spelling rules.
	// Optional.
	AllowedMethods []string `json:"allowed_methods"`

	// SubstituteIn lists the parts of a request in which token names are
	// replaced by their values: "headers", "query", "path", "body".
	// Default ["headers"]. Anywhere else a token name travels as the
	// literal name, so code cannot make the API store or forward a secret
	// (a webhook URL, a comment, a stored object) unless the API opted in.
	SubstituteIn []string `json:"substitute_in"`

	// Ports are the TCP ports of the API's hosts to which credentials may
	// be sent, always over verified TLS. Default [443]. A request that
	// would put a credential in cleartext or on another port is refused.
	Ports []int `json:"ports"`

	// Active turns the API off when false: it is then hidden from
	// list_apis, execute_code and the proxy, but still validated, so
	// switching it back on can never break startup. Default true.
	Active *bool `json:"active"`
}

// maxConfigSize caps config.json; real ones are a few hundred bytes.
const maxConfigSize = 1 << 20

var (
	apiNameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	tokenNameRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]{3,127}$`)
	envRefRE    = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$`)
)

// fieldKind is the JSON shape a config field must have.
type fieldKind int

const (
	kindString fieldKind = iota
	kindStringList
	kindStringMap
	kindBool
	kindPortList
)

func (k fieldKind) String() string {
	switch k {
	case kindString:
		return "a string"
	case kindStringList:
		return "an array of strings"
	case kindStringMap:
		return "an object whose values are strings"
	case kindPortList:
		return "an array of port numbers"
	default:
		return "true or false"
	}
}

// configFields is the fixed schema of config.json, in documentation order.
var configFields = []struct {
	name string
	kind fieldKind
}{
	{"description", kindString},
	{"domains", kindStringList},
	{"credentials", kindStringMap},
	{"reference", kindString},
	{"restricted_methods", kindStringList},
	{"allowed_methods", kindStringList},
	{"substitute_in", kindStringList},
	{"ports", kindPortList},
	{"active", kindBool},
}

// standardMethods are the methods restricted_methods accepts (RFC 9110, RFC 5789).
var standardMethods = []string{"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}

// fileErrors collects the problems of one config file; every message is
// prefixed with the file's path.
type fileErrors struct {
	file string
	errs []error
}

func (f *fileErrors) add(format string, args ...any) {
	f.errs = append(f.errs, fmt.Errorf("%s: "+format, append([]any{f.file}, args...)...))
}

func (f *fileErrors) err() error { return errors.Join(f.errs...) }

// decodeConfig checks the document's shape token by token (so every error
// can name its field and line) and then decodes it strictly.
func decodeConfig(file string, data []byte) (*Config, error) {
	fe := &fileErrors{file: file}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 BOM some editors add
	if !utf8.Valid(data) {
		// encoding/json would silently turn bad bytes into U+FFFD,
		// altering a secret without a word.
		return nil, fmt.Errorf("%s: not valid UTF-8; save the file as UTF-8", file)
	}
	if err := checkShape(fe, strictjson.NewReader(data)); err != nil {
		// A syntax error ends the walk; report it alone with what came before.
		fe.errs = append(fe.errs, syntaxError(file, err))
		return nil, fe.err()
	}
	if len(fe.errs) > 0 {
		return nil, fe.err()
	}
	var c Config
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		// checkShape admits only what Config accepts; this is a backstop.
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%s: trailing data after the JSON object", file)
	}
	return &c, nil
}

// syntaxError words a strictjson.Reader error for a config file.
func syntaxError(file string, err error) error {
	switch {
	case errors.Is(err, strictjson.ErrEmpty):
		return fmt.Errorf("%s: file is empty; want a JSON object such as {\"domains\": [\"api.example.com\"]}", file)
	case errors.Is(err, strictjson.ErrUnexpectedEnd), err == io.EOF:
		return fmt.Errorf("%s: invalid JSON: unexpected end of file (unclosed object, array or string?)", file)
	}
	return fmt.Errorf("%s: %w", file, err) // "invalid JSON at line L, column C: …"
}

// checkShape walks the JSON tokens of a config file. It records field
// problems in fe and returns a non-nil error only for a syntax error, after
// which the walk cannot go on.
func checkShape(fe *fileErrors, r *strictjson.Reader) error {
	tok, err := r.Next()
	if err != nil {
		return err
	}
	if tok.Value != json.Delim('{') {
		return fmt.Errorf("want a JSON object at the top level, got %s", strictjson.Kind(tok.Raw, strictjson.TypeOnly))
	}
	seen := map[string]strictjson.Pos{}
	for r.More() {
		keyTok, err := r.Next()
		if err != nil {
			return err
		}
		key := keyTok.Value.(string) // Token guarantees object keys are strings.
		if prev, dup := seen[key]; dup {
			fe.add("%s: duplicate key at %s (first at %s); keep one", key, keyTok.Pos, prev)
		}
		seen[key] = keyTok.Pos
		kind, known := fieldKindOf(key)
		if !known {
			fe.add("unknown field %q at %s%s; known fields: %s", key, keyTok.Pos, didYouMean(key), knownFields())
		}
		tok, err := r.Next()
		if err != nil {
			return err
		}
		if !known {
			if err := r.Skip(tok); err != nil {
				return err
			}
			continue
		}
		if err := checkField(fe, r, key, kind, tok); err != nil {
			return err
		}
	}
	if _, err := r.Next(); err != nil { // the closing '}'
		return err
	}
	switch tok, err := r.Next(); {
	case err == io.EOF:
		return nil
	case err != nil:
		return err
	default:
		return fmt.Errorf("trailing data after the JSON object at %s (%s); a config file holds exactly one object",
			tok.Pos, strictjson.Kind(tok.Raw, strictjson.TypeOnly))
	}
}

// checkField checks one known field's value, whose first token is tok.
// Messages name a value's type but never quote it: it may be a secret.
func checkField(fe *fileErrors, r *strictjson.Reader, key string, kind fieldKind, tok strictjson.Token) error {
	// mismatch records a value of the wrong type and skips it.
	mismatch := func(field, want string, tok strictjson.Token) error {
		if strictjson.IsNull(tok.Raw) {
			fe.add("%s: null at %s; want %s (leave the field out to use its default)", field, tok.Pos, want)
		} else {
			fe.add("%s: want %s, got %s at %s", field, want, strictjson.Kind(tok.Raw, strictjson.TypeOnly), tok.Pos)
		}
		return r.Skip(tok)
	}
	switch kind {
	case kindString:
		if _, ok := tok.Value.(string); !ok {
			return mismatch(key, kind.String(), tok)
		}
	case kindBool:
		if _, ok := tok.Value.(bool); !ok {
			return mismatch(key, kind.String(), tok)
		}
	case kindStringList, kindPortList:
		if tok.Value != json.Delim('[') {
			return mismatch(key, kind.String(), tok)
		}
		for i := 0; r.More(); i++ {
			el, err := r.Next()
			if err != nil {
				return err
			}
			field := fmt.Sprintf("%s[%d]", key, i)
			if kind == kindPortList {
				n, ok := el.Value.(json.Number)
				switch {
				case !ok:
					err = mismatch(field, "a port number", el)
				case !isPort(n):
					fe.add("%s: %s at %s is not a TCP port; want a whole number from 1 to 65535, e.g. 443", field, n, el.Pos)
				}
			} else if _, ok := el.Value.(string); !ok {
				err = mismatch(field, "a string", el)
			}
			if err != nil {
				return err
			}
		}
		_, err := r.Next() // ']'
		return err
	case kindStringMap:
		if tok.Value != json.Delim('{') {
			return mismatch(key, kind.String(), tok)
		}
		seen := map[string]strictjson.Pos{}
		for r.More() {
			k, err := r.Next()
			if err != nil {
				return err
			}
			name := k.Value.(string)
			field := key + "." + name
			if prev, dup := seen[name]; dup {
				fe.add("%s: duplicate key at %s (first at %s); each token name may appear once", field, k.Pos, prev)
			}
			seen[name] = k.Pos
			v, err := r.Next()
			if err != nil {
				return err
			}
			if _, ok := v.Value.(string); !ok {
				if err := mismatch(field, "a string", v); err != nil {
					return err
				}
			}
		}
		_, err := r.Next() // '}'
		return err
	}
	return nil
}

// isPort reports whether n is a whole number from 1 to 65535.
func isPort(n json.Number) bool {
	v, err := strconv.Atoi(n.String())
	return err == nil && v >= 1 && v <= 65535
}

func fieldKindOf(name string) (fieldKind, bool) {
	for _, f := range configFields {
		if f.name == name {
			return f.kind, true
		}
	}
	return 0, false
}

func knownFields() string {
	names := make([]string, len(configFields))
	for i, f := range configFields {
		names[i] = f.name
	}
	return strings.Join(names, ", ")
}

// didYouMean suggests the known field a misspelt key probably meant.
func didYouMean(key string) string {
	norm := func(s string) string {
		return strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(s))
	}
	for _, f := range configFields {
		if n, k := norm(f.name), norm(key); n == k || n == k+"s" || n+"s" == k {
			return fmt.Sprintf(" (did you mean %q?)", f.name)
		}
	}
	return ""
}

// validate checks a decoded config and turns it into an API (without the
// cross-API checks, which Load does once every file is read). A nil getenv
// leaves credential values unread (LoadNames).
func validate(fe *fileErrors, name string, c *Config, getenv func(string) (string, bool)) *API {
	api := &API{
		Name:        name,
		Description: strings.TrimSpace(c.Description),
		Credentials: map[string]string{},
		Reference:   c.Reference,
		Active:      c.Active == nil || *c.Active,
	}

	if len(c.Domains) == 0 {
		fe.add(`domains: required; list at least one host name, e.g. "domains": ["api.example.com"]`)
	}
	firstSeen := map[string]int{}
	for i, raw := range c.Domains {
		host, problem := normalizeHost(raw)
		if problem != "" {
			fe.add("domains[%d] %q: %s", i, raw, problem)
			continue
		}
		if j, dup := firstSeen[host]; dup {
			fe.add("domains[%d] %q: duplicate of domains[%d]; list each host once", i, raw, j)
			continue
		}
		firstSeen[host] = i
		api.Domains = append(api.Domains, host)
	}

	for _, token := range sortedKeys(c.Credentials) {
		field := "credentials." + token
		if !tokenNameRE.MatchString(token) {
			fe.add("credentials: token name %q: want an upper-case letter followed by 3 to 127 upper-case letters, digits or '_' (%s), e.g. %q",
				token, tokenNameRE, suggestToken(token))
			continue
		}
		// On failure the name is kept (with no value) so the cross-API
		// checks still see it; Load returns no Set when anything failed.
		if getenv == nil { // LoadNames: token names only, no secret read
			api.Credentials[token] = ""
			continue
		}
		value, _ := resolveValue(fe, field, c.Credentials[token], getenv)
		api.Credentials[token] = value
	}

	if c.Reference != "" {
		u, err := url.Parse(c.Reference)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			fe.add("reference %q: want an absolute http(s) URL such as \"https://docs.example.com/api\", or leave the field out", c.Reference)
		}
	}

	api.RestrictedMethods = methodList(fe, "restricted_methods", c.RestrictedMethods)
	api.AllowedMethods = methodList(fe, "allowed_methods", c.AllowedMethods)
	if c.RestrictedMethods != nil && c.AllowedMethods != nil {
		fe.add("restricted_methods and allowed_methods: set one or the other, not both; allowed_methods (only these methods pass) is the stronger choice")
	} else if c.AllowedMethods != nil && len(c.AllowedMethods) == 0 {
		fe.add(`allowed_methods: empty list would refuse every request; list the methods to let through, e.g. ["GET", "HEAD"], or leave the field out`)
	}

	api.SubstituteIn = []string{PlaceHeaders}
	if c.SubstituteIn != nil {
		api.SubstituteIn = nil
		seen := map[string]int{}
		for i, raw := range c.SubstituteIn {
			place := strings.ToLower(strings.TrimSpace(raw))
			if !slices.Contains(Places, place) {
				fe.add("substitute_in[%d] %q: unknown place; want one of %s", i, raw, strings.Join(Places, ", "))
				continue
			}
			if j, dup := seen[place]; dup {
				fe.add("substitute_in[%d] %q: duplicate of substitute_in[%d]; list each place once", i, raw, j)
				continue
			}
			seen[place] = i
			api.SubstituteIn = append(api.SubstituteIn, place)
		}
		slices.Sort(api.SubstituteIn)
	}

	api.Ports = []int{443}
	if c.Ports != nil {
		if len(c.Ports) == 0 {
			fe.add("ports: empty list would let credentials go nowhere; list the HTTPS ports, e.g. [443, 8443], or leave the field out for [443]")
		}
		api.Ports = nil
		seen := map[int]int{}
		for i, port := range c.Ports {
			if j, dup := seen[port]; dup {
				fe.add("ports[%d] %d: duplicate of ports[%d]; list each port once", i, port, j)
				continue
			}
			seen[port] = i
			api.Ports = append(api.Ports, port)
		}
		slices.Sort(api.Ports)
	}
	return api
}

// methodList validates a list of HTTP methods (restricted_methods or
// allowed_methods) and returns them upper case and sorted.
func methodList(fe *fileErrors, field string, raw []string) []string {
	var out []string
	seen := map[string]int{}
	for i, r := range raw {
		m := strings.ToUpper(strings.TrimSpace(r))
		if !slices.Contains(standardMethods, m) {
			fe.add("%s[%d] %q: unknown HTTP method; want one of %s", field, i, r, strings.Join(standardMethods, ", "))
			continue
		}
		if j, dup := seen[m]; dup {
			fe.add("%s[%d] %q: duplicate of %s[%d]; list each method once", field, i, r, field, j)
			continue
		}
		seen[m] = i
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// resolveValue checks one credential value, reading a "${NAME}" reference
// from the environment. Messages never include the value itself.
func resolveValue(fe *fileErrors, field, raw string, getenv func(string) (string, bool)) (string, bool) {
	source := "value"
	value := raw
	if m := envRefRE.FindStringSubmatch(raw); m != nil {
		v, ok := getenv(m[1])
		if !ok {
			fe.add("%s: environment variable %s is not set (the value is %q); set it in the environment or in .env", field, m[1], raw)
			return "", false
		}
		if v == "" {
			fe.add("%s: environment variable %s is empty (the value is %q); give it the secret", field, m[1], raw)
			return "", false
		}
		source = "value of $" + m[1]
		value = v
	} else if strings.Contains(raw, "${") {
		fe.add("%s: the value contains \"${\" but is not exactly \"${NAME}\"; only a whole-value environment reference such as \"${STRIPE_SECRET_KEY}\" is supported", field)
		return "", false
	}
	switch {
	case value == "":
		fe.add(`%s: empty value; give the secret, or "${ENV_VAR}" to read it from the environment`, field)
		return "", false
	case len(value) < 4:
		fe.add("%s: %s is %d characters; want at least 4 (shorter values would be swapped back into responses too eagerly)", field, source, len(value))
		return "", false
	case strings.TrimSpace(value) != value:
		fe.add("%s: %s has leading or trailing white space; remove it", field, source)
		return "", false
	case strings.IndexFunc(value, unicode.IsControl) >= 0:
		fe.add("%s: %s contains a control character (such as a newline); a secret sent in HTTP must not", field, source)
		return "", false
	}
	return value, true
}

// suggestToken turns a bad token name into a plausible valid one.
func suggestToken(s string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(s) {
		switch {
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_':
			b.WriteRune(r)
		case r == '-' || r == '.' || r == ' ':
			b.WriteByte('_')
		}
	}
	out := strings.TrimLeft(b.String(), "0123456789_")
	for len(out) < 4 {
		out += "_KEY"
	}
	if len(out) > 128 {
		out = out[:128]
	}
	return out
}

// hostRule is the rule every domain must follow, quoted in its errors.
const hostRule = "want a bare host name (no scheme, port, path or wildcard)"

// normalizeHost lower-cases a domain and drops a trailing dot, or says what
// is wrong with it.
func normalizeHost(raw string) (host, problem string) {
	s := raw
	switch {
	case s == "":
		return "", "empty; " + hostRule
	case strings.Contains(s, "://"):
		if u, err := url.Parse(s); err == nil && u.Hostname() != "" {
			return "", fmt.Sprintf("%s: remove the scheme, e.g. %q", hostRule, u.Hostname())
		}
		return "", hostRule + ": remove the scheme"
	case strings.Contains(s, "*"):
		return "", hostRule + ": wildcards are not supported; list every host explicitly"
	case strings.ContainsAny(s, "/?#"):
		return "", fmt.Sprintf("%s: remove the path, e.g. %q", hostRule, s[:strings.IndexAny(s, "/?#")])
	}
	if isIPLiteral(s) {
		return "", "IP literals are not allowed; " + hostRule + ", e.g. \"api.example.com\""
	}
	if i := strings.LastIndexByte(s, ':'); i >= 0 {
		return "", fmt.Sprintf("%s: remove the port, e.g. %q", hostRule, s[:i])
	}
	s = strings.TrimSuffix(strings.ToLower(s), ".")
	if s == "" || len(s) > 253 {
		return "", fmt.Sprintf("a host name has 1 to 253 characters; %s", hostRule)
	}
	labels := strings.Split(s, ".")
	for _, l := range labels {
		if l == "" {
			return "", "empty label (\"..\" or a leading dot); " + hostRule
		}
		if len(l) > 63 {
			return "", fmt.Sprintf("label %q is %d characters; each dot-separated label has at most 63", l, len(l))
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Sprintf("label %q starts or ends with '-'; host names do not", l)
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
				hint := ""
				if r > unicode.MaxASCII {
					hint = " (write internationalised names in their xn-- punycode form)"
				}
				return "", fmt.Sprintf("invalid character %q; host names use letters, digits, '-' and '.'%s", r, hint)
			}
		}
	}
	if numericLabel(labels[len(labels)-1]) {
		return "", "the last label is numeric, which resolvers may read as an IP address; " + hostRule
	}
	return s, ""
}

// isIPLiteral reports whether s is an IPv4 or IPv6 address, bracketed or
// not, with or without a port or zone.
func isIPLiteral(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	if _, err := netip.ParseAddrPort(s); err == nil {
		return true
	}
	if _, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")); err == nil {
		return true
	}
	return strings.HasPrefix(s, "[")
}

// numericLabel reports whether a label is a number (decimal, octal or 0x
// hex), which the WHATWG URL parser and inet_aton would treat as part of
// an IPv4 address ("127.1", "0x7f000001").
func numericLabel(l string) bool {
	digits := "0123456789"
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		l, digits = h, "0123456789abcdef"
	}
	for _, r := range l {
		if !strings.ContainsRune(digits, r) {
			return false
		}
	}
	return true
}
