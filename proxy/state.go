package proxy

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/proxy/rewrite"
)

// state is everything derived from one API set. It is immutable; Reload
// swaps in a new one.
type state struct {
	set  *apis.Set
	apis map[string]*apiRules // by API name, active APIs only
	// reverse turns every credential value of every API (inactive ones
	// too) back into its token name, however a response spells it
	// (literal, percent- or form-encoded, JSON-escaped); the value's
	// base64 forms at any offset are Refuse patterns. It guards every
	// response from every host, and every log line and error text.
	reverse *rewrite.Replacer
	// revPatterns are reverse's patterns, which a run extends with the
	// Basic credentials the proxy assembled for it.
	revPatterns []rewrite.Pattern
}

// apiRules are one API's precomputed replacers.
type apiRules struct {
	api *apis.API
	// Token name -> value, encoded for where it lands: as is (headers,
	// bodies of other types), form-encoded (query strings and
	// application/x-www-form-urlencoded bodies), path-escaped, and
	// JSON-escaped (inside JSON strings).
	fwd, fwdQuery, fwdPath, fwdJSON *rewrite.Replacer
	// names finds the API's token names (each replaced by itself): a
	// name left as a name, or one that must not travel at all.
	names, namesRefused *rewrite.Replacer
}

// minBase64Core is the shortest base64 run looked for as a credential's
// encoded form: shorter ones would turn up by chance in base64 data.
const minBase64Core = 10

func newState(set *apis.Set) (*state, error) {
	st := &state{set: set, apis: map[string]*apiRules{}}
	for _, a := range set.Active() {
		r, err := newAPIRules(a)
		if err != nil {
			return nil, fmt.Errorf("API %q: %w", a.Name, err)
		}
		st.apis[a.Name] = r
	}
	creds := map[string]string{}
	for _, a := range set.All() {
		for name, v := range a.Credentials {
			creds[name] = v
		}
	}
	st.revPatterns = reversePatterns(creds)
	var err error
	if st.reverse, err = rewrite.NewPatterns(st.revPatterns, rewrite.Options{Decode: true}); err != nil {
		return nil, fmt.Errorf("credential scrubber: %w", err)
	}
	return st, nil
}

func newAPIRules(a *apis.API) (*apiRules, error) {
	forms := map[string]func(string) string{
		"fwd":      func(v string) string { return v },
		"fwdQuery": url.QueryEscape,
		"fwdPath":  url.PathEscape,
		"fwdJSON":  jsonEscape,
	}
	r := &apiRules{api: a}
	dst := map[string]**rewrite.Replacer{"fwd": &r.fwd, "fwdQuery": &r.fwdQuery, "fwdPath": &r.fwdPath, "fwdJSON": &r.fwdJSON}
	for form, enc := range forms {
		pairs := map[string]string{}
		for name, value := range a.Credentials {
			pairs[name] = enc(value)
		}
		rep, err := rewrite.New(pairs)
		if err != nil {
			return nil, err
		}
		*dst[form] = rep
	}
	var names, refused []rewrite.Pattern
	for _, name := range a.TokenNames() {
		names = append(names, rewrite.Pattern{Old: name, New: name})
		refused = append(refused, rewrite.Pattern{Old: name, New: name, Refuse: true})
	}
	var err error
	if r.names, err = rewrite.NewPatterns(names, rewrite.Options{}); err != nil {
		return nil, err
	}
	if r.namesRefused, err = rewrite.NewPatterns(refused, rewrite.Options{}); err != nil {
		return nil, err
	}
	return r, nil
}

// jsonEscape writes s as the inside of a JSON string.
func jsonEscape(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return string(bytes.TrimSuffix(bytes.TrimSuffix(b.Bytes(), []byte("\n")), []byte(`"`)))[1:]
}

// base64Label is what a log line shows in place of a credential's base64
// form, and what a refusal names.
func base64Label(name string) string { return name + " (base64-encoded)" }

// reversePatterns maps each credential value to its token name, and marks
// the value's base64 and base64url forms at every byte offset as Refuse
// patterns: a stream cannot turn those back into the name. When two
// tokens share a value, or two forms coincide, the alphabetically first
// name wins, so the result does not depend on map order.
func reversePatterns(creds map[string]string) []rewrite.Pattern {
	names := make([]string, 0, len(creds))
	for n := range creds {
		names = append(names, n)
	}
	slices.Sort(names)
	seen := map[string]bool{}
	var out []rewrite.Pattern
	add := func(p rewrite.Pattern) {
		if p.Old != "" && !seen[p.Old] {
			seen[p.Old] = true
			out = append(out, p)
		}
	}
	for _, name := range names {
		v := creds[name]
		if v == "" { // LoadNames: no values known
			continue
		}
		add(rewrite.Pattern{Old: v, New: name})
		for _, core := range base64Cores(v) {
			add(rewrite.Pattern{Old: core, New: base64Label(name), Refuse: true})
		}
	}
	return out
}

// base64Cores returns the parts of v's base64 and base64url encodings that
// stay the same whatever bytes surround v: for each of the three offsets
// v can start at within a 3-byte group, the characters that encode only
// v's own bits. Any base64 text that holds v, at any offset, holds one of
// them. Cores shorter than minBase64Core are left out.
func base64Cores(v string) []string {
	var out []string
	for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
		for k := range 3 {
			s := enc.EncodeToString(append(make([]byte, k), v...))
			skip := []int{0, 2, 3}[k] // characters holding bits of the k bytes before v
			end := len(s)
			if (k+len(v))%3 != 0 {
				end-- // the last character holds bits of what follows v
			}
			if end-skip >= minBase64Core && !slices.Contains(out, s[skip:end]) {
				out = append(out, s[skip:end])
			}
		}
	}
	return out
}

// basicBlobs remembers, per run, the Basic credentials the proxy assembled
// (base64 of "user:value") and what the code wrote (base64 of
// "user:TOKEN"), so an API that echoes one gets the code's own text back.
// Bounded: the oldest are forgotten, after which an echo is refused as a
// base64 form instead.
type basicBlobs struct {
	mu    sync.Mutex
	pairs []rewrite.Pattern
	// cache is the reverse replacer for state st extended with pairs.
	st    *state
	cache *rewrite.Replacer
}

const maxBasicBlobs = 16

func (b *basicBlobs) add(assembled, written string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, p := range b.pairs {
		if p.Old == assembled {
			return
		}
	}
	if len(b.pairs) == maxBasicBlobs {
		b.pairs = b.pairs[1:]
	}
	b.pairs = append(b.pairs, rewrite.Pattern{Old: assembled, New: written})
	b.cache = nil
}

// reverse returns the replacer for responses of this run.
func (b *basicBlobs) reverse(st *state) *rewrite.Replacer {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pairs) == 0 {
		return st.reverse
	}
	if b.cache != nil && b.st == st {
		return b.cache
	}
	ps := slices.Clone(st.revPatterns)
	for _, p := range b.pairs {
		if !slices.ContainsFunc(ps, func(q rewrite.Pattern) bool { return q.Old == p.Old }) {
			ps = append(ps, p)
		}
	}
	r, err := rewrite.NewPatterns(ps, rewrite.Options{Decode: true})
	if err != nil {
		return st.reverse // cannot happen: patterns are distinct and non-empty
	}
	b.st, b.cache = st, r
	return r
}

// redactor builds the REDACTING_STRINGS replacer, covering the URL-escaped
// forms of each string too.
func redactor(strs []string) (*rewrite.Replacer, error) {
	pairs := map[string]string{}
	for _, s := range strs {
		if s == "" {
			continue
		}
		for _, form := range []string{s, url.PathEscape(s), url.QueryEscape(s)} {
			pairs[form] = "REDACTED"
		}
	}
	r, err := rewrite.New(pairs)
	if err != nil {
		return nil, fmt.Errorf("proxy: REDACTING_STRINGS: %w", err)
	}
	return r, nil
}

// scrub removes every known credential value from s (log lines, errors),
// in every form the reverse pass knows.
func (p *Proxy) scrub(s string) string {
	out, _ := p.state.Load().reverse.String(s)
	return out
}

// describePlaces joins places for a message: "headers, query and body".
func describePlaces(places []string) string {
	if len(places) <= 1 {
		return strings.Join(places, "")
	}
	return strings.Join(places[:len(places)-1], ", ") + " and " + places[len(places)-1]
}
