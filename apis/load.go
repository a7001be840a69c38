package apis

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/codeforge/codeforge/settings"
)

// Load reads every dir/<name>/config.json, validates it (see Config) and
// returns the resulting Set. Every problem in every file is reported at
// once, each naming its file and field; on any problem Load returns no Set.
//
// The directory layout:
//
//   - dir missing altogether: an empty Set and no error (a server with no
//     APIs still runs code; YOLO mode may still reach the network).
//   - dir/<name>/ with config.json: an API called <name>, which must match
//     ^[a-z0-9][a-z0-9_-]{0,63}$. An optional types.d.ts beside it sets
//     TypesPath.
//   - dir/<name>/ with only config.json.example (like apis/example): a
//     template, skipped.
//   - any other directory: an error (a misnamed config file is the usual cause).
//   - plain files and names starting with "." are ignored.
//
// getenv resolves "${NAME}" credential values (os.LookupEnv fits, or a
// settings.Dotenv's Lookup, which main passes).
func Load(dir string, getenv settings.Getenv) (*Set, error) {
	if getenv == nil {
		return nil, errors.New("apis.Load: nil getenv; use LoadNames to load without secrets")
	}
	return load(dir, getenv)
}

// LoadNames is Load for a process that must hold no secret (the server of
// the Docker deployment, where only the proxy holds them): everything is
// validated as by Load except the credential values, which are neither
// read nor resolved — each API's Credentials maps its token names to "".
func LoadNames(dir string) (*Set, error) {
	return load(dir, nil)
}

func load(dir string, getenv settings.Getenv) (*Set, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return newSet(nil), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read APIs directory: %w", err)
	}
	var (
		errs   []error
		loaded []*API
		files  = map[*API]string{} // config path as the caller spelt dir
	)
	for _, e := range entries { // ReadDir sorts by name
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		sub := filepath.Join(dir, name)
		fi, err := os.Stat(sub) // follow symlinked directories
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sub, err))
			continue
		}
		if !fi.IsDir() {
			continue
		}
		api, err := loadDir(name, sub, getenv)
		if err != nil {
			errs = append(errs, err)
		}
		if api != nil {
			loaded = append(loaded, api)
			files[api] = filepath.Join(sub, "config.json")
		}
	}
	errs = append(errs, crossCheck(loaded, files)...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return newSet(loaded), nil
}

// loadDir loads one API directory. It returns (nil, nil) for a template
// directory, and the API alongside any error so that cross-API checks can
// still see its token names and domains.
func loadDir(name, sub string, getenv settings.Getenv) (*API, error) {
	file := filepath.Join(sub, "config.json")
	data, err := readConfig(file)
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(sub, "config.json.example")); err == nil {
			return nil, nil
		}
		return nil, fmt.Errorf("%s: no config.json in this API directory%s; add one (see apis/README.md) or remove the directory",
			sub, similarFiles(sub))
	}
	if err != nil {
		return nil, err
	}
	if !apiNameRE.MatchString(name) {
		return nil, fmt.Errorf("%s: API name %q (the directory name): want lower-case letters, digits, '_' and '-', starting with a letter or digit, at most 64 characters (%s)",
			file, name, apiNameRE)
	}
	c, err := decodeConfig(file, data)
	if err != nil {
		return nil, err
	}
	fe := &fileErrors{file: file}
	api := validate(fe, name, c, getenv)
	if api.ConfigPath, err = filepath.Abs(file); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	types := filepath.Join(sub, "types.d.ts")
	switch fi, err := os.Stat(types); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		fe.errs = append(fe.errs, fmt.Errorf("%s: %w", types, err))
	case !fi.Mode().IsRegular():
		fe.errs = append(fe.errs, fmt.Errorf("%s: not a regular file; types.d.ts must be a TypeScript declaration file", types))
	default:
		if api.TypesPath, err = filepath.Abs(types); err != nil {
			return nil, fmt.Errorf("%s: %w", types, err)
		}
	}
	return api, fe.err()
}

func readConfig(file string) ([]byte, error) {
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxConfigSize+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if len(data) > maxConfigSize {
		return nil, fmt.Errorf("%s: larger than %d bytes; a config file is a small JSON object", file, maxConfigSize)
	}
	return data, nil
}

// similarFiles names files in dir that look like a misnamed config.json.
func similarFiles(dir string) string {
	entries, _ := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		if n := strings.ToLower(e.Name()); strings.Contains(n, "config") || strings.HasSuffix(n, ".json") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf(" (found %s; the file must be named exactly config.json)", strings.Join(names, ", "))
}

// crossCheck enforces what must hold across all APIs, active or not: every
// host has one owner, token names are unique and none contains another,
// and no credential value contains a token name.
func crossCheck(apis []*API, files map[*API]string) []error {
	var errs []error
	type owner struct {
		api   *API
		token string
	}
	hosts := map[string]*API{}
	var tokens []owner
	for _, a := range apis {
		for _, h := range a.Domains {
			if prev, ok := hosts[h]; ok {
				errs = append(errs, fmt.Errorf("%s: domains: %q is already claimed by API %q (%s); a host may belong to one API only, so each secret has one owner",
					files[a], h, prev.Name, files[prev]))
				continue
			}
			hosts[h] = a
		}
		for _, t := range a.TokenNames() {
			tokens = append(tokens, owner{a, t})
		}
	}
	for i, t := range tokens {
		for j, u := range tokens {
			switch {
			case i == j:
			case t.token == u.token && j < i:
				errs = append(errs, fmt.Errorf("%s: credentials.%s: token name already used by API %q (%s); token names must be unique across all APIs",
					files[t.api], t.token, u.api.Name, files[u.api]))
			case t.token != u.token && strings.Contains(u.token, t.token):
				errs = append(errs, fmt.Errorf("%s: credentials.%s: token name is part of token name %q (API %q, %s); no token name may contain another, or substitution would be ambiguous",
					files[t.api], t.token, u.token, u.api.Name, files[u.api]))
			}
		}
	}
	for _, a := range apis {
		for _, t := range a.TokenNames() {
			for _, u := range tokens {
				if v := a.Credentials[t]; v != "" && strings.Contains(v, u.token) {
					errs = append(errs, fmt.Errorf("%s: credentials.%s: the secret value contains the token name %q (API %q); reverse substitution would be ambiguous, so rename the token",
						files[a], t, u.token, u.api.Name))
				}
			}
		}
	}
	return errs
}

// Set is the loaded APIs. It is immutable after Load; callers must treat
// the returned *API values as read-only. A nil *Set is an empty set.
type Set struct {
	all    []*API          // sorted by name, active or not
	active []*API          // sorted by name
	byName map[string]*API // active only
	byHost map[string]*API // active only
}

func newSet(apis []*API) *Set {
	s := &Set{byName: map[string]*API{}, byHost: map[string]*API{}}
	s.all = slices.Clone(apis)
	slices.SortFunc(s.all, func(a, b *API) int { return strings.Compare(a.Name, b.Name) })
	for _, a := range s.all {
		if !a.Active {
			continue
		}
		s.active = append(s.active, a)
		s.byName[a.Name] = a
		for _, h := range a.Domains {
			s.byHost[h] = a
		}
	}
	return s
}

// All returns every API, inactive ones included, sorted by name.
func (s *Set) All() []*API {
	if s == nil {
		return nil
	}
	return slices.Clone(s.all)
}

// Active returns the active APIs, sorted by name.
func (s *Set) Active() []*API {
	if s == nil {
		return nil
	}
	return slices.Clone(s.active)
}

// Get returns the active API called name.
func (s *Set) Get(name string) (*API, bool) {
	if s == nil {
		return nil, false
	}
	a, ok := s.byName[name]
	return a, ok
}

// Names returns the names of the active APIs, sorted.
func (s *Set) Names() []string {
	if s == nil {
		return nil
	}
	names := make([]string, len(s.active))
	for i, a := range s.active {
		names[i] = a.Name
	}
	return names
}

// ForHost returns the active API that owns exactly this host, or nil. The
// host is matched case-insensitively, without a port ("api.x.com:443") or
// trailing dot. There is no suffix matching: a subdomain is another host.
func (s *Set) ForHost(host string) *API {
	if s == nil {
		return nil
	}
	return s.byHost[canonicalHost(host)]
}

func canonicalHost(host string) string {
	h := strings.ToLower(host)
	if strings.HasPrefix(h, "[") {
		// An IP literal, never an API host; keep it unmatchable.
		return h
	}
	if i := strings.LastIndexByte(h, ':'); i >= 0 && strings.Count(h, ":") == 1 {
		h = h[:i]
	}
	return strings.TrimSuffix(h, ".")
}

// Resolve turns execute_code's apis argument into APIs, sorted by name and
// without duplicates. No names means every active API. An unknown or
// inactive name is an error that lists the valid names.
func (s *Set) Resolve(names []string) ([]*API, error) {
	if len(names) == 0 {
		return s.Active(), nil
	}
	var (
		out      []*API
		problems []string
	)
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		a, ok := s.Get(n)
		switch {
		case ok:
			out = append(out, a)
		case s.isInactive(n):
			problems = append(problems, fmt.Sprintf("API %q is inactive", n))
		default:
			problems = append(problems, fmt.Sprintf("unknown API %q", n))
		}
	}
	if len(problems) > 0 {
		valid := strings.Join(s.Names(), ", ")
		if valid == "" {
			valid = "none (no active APIs are configured)"
		}
		return nil, fmt.Errorf("%s; valid: %s", strings.Join(problems, ", "), valid)
	}
	slices.SortFunc(out, func(a, b *API) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (s *Set) isInactive(name string) bool {
	if s == nil {
		return false
	}
	for _, a := range s.all {
		if a.Name == name && !a.Active {
			return true
		}
	}
	return false
}

// Domains returns the hosts of the given APIs, sorted and without
// duplicates (execute_code's network allowlist for a run).
func Domains(apis []*API) []string {
	var out []string
	for _, a := range apis {
		out = append(out, a.Domains...)
	}
	slices.Sort(out)
	return slices.Compact(out)
}
