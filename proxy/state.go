package proxy

import (
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/codeforge/codeforge/apis"
	"github.com/codeforge/codeforge/proxy/rewrite"
)

// state is everything derived from one API set. It is immutable; Reload
// swaps in a new one.
type state struct {
	set  *apis.Set
	apis map[string]*apiRules // by API name, active APIs only
	// scrub turns every credential value of every API (inactive ones too)
	// back into its name; it guards log lines and error texts.
	scrub *rewrite.Replacer
}

// apiRules are one API's precomputed replacers.
type apiRules struct {
	api *apis.API
	// fwd: token name -> value, for headers and bodies; fwdPath and
	// fwdQuery insert the value escaped for the URL part it lands in.
	fwd, fwdPath, fwdQuery *rewrite.Replacer
	// rev: value (and its URL-escaped forms) -> token name.
	rev        *rewrite.Replacer
	restricted []string
}

func newState(set *apis.Set) (*state, error) {
	st := &state{set: set, apis: map[string]*apiRules{}}
	for _, a := range set.Active() {
		r, err := newAPIRules(a)
		if err != nil {
			return nil, fmt.Errorf("API %q: %w", a.Name, err)
		}
		st.apis[a.Name] = r
	}
	all := map[string]string{}
	for _, a := range set.All() {
		addReverse(all, a.Credentials)
	}
	var err error
	if st.scrub, err = rewrite.New(all); err != nil {
		return nil, fmt.Errorf("credential scrubber: %w", err)
	}
	return st, nil
}

func newAPIRules(a *apis.API) (*apiRules, error) {
	fwd := map[string]string{}
	fwdPath := map[string]string{}
	fwdQuery := map[string]string{}
	for name, value := range a.Credentials {
		fwd[name] = value
		fwdPath[name] = url.PathEscape(value)
		fwdQuery[name] = url.QueryEscape(value)
	}
	rev := map[string]string{}
	addReverse(rev, a.Credentials)
	r := &apiRules{api: a}
	for _, m := range a.RestrictedMethods {
		r.restricted = append(r.restricted, strings.ToUpper(m))
	}
	var err error
	if r.fwd, err = rewrite.New(fwd); err != nil {
		return nil, err
	}
	if r.fwdPath, err = rewrite.New(fwdPath); err != nil {
		return nil, err
	}
	if r.fwdQuery, err = rewrite.New(fwdQuery); err != nil {
		return nil, err
	}
	if r.rev, err = rewrite.New(rev); err != nil {
		return nil, err
	}
	return r, nil
}

// addReverse maps each credential value, and the forms it takes when
// URL-escaped, to its token name. When two tokens share a value the
// alphabetically first name wins, so the result does not depend on map
// order.
func addReverse(dst map[string]string, creds map[string]string) {
	names := make([]string, 0, len(creds))
	for n := range creds {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, name := range names {
		v := creds[name]
		for _, form := range []string{v, url.PathEscape(v), url.QueryEscape(v)} {
			if form == "" {
				continue
			}
			if prev, ok := dst[form]; !ok || name < prev {
				dst[form] = name
			}
		}
	}
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

// scrub removes every known credential value from s (log lines, errors).
func (p *Proxy) scrub(s string) string {
	out, _ := p.state.Load().scrub.String(s)
	return out
}
