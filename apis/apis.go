// Package apis loads the API configurations (apis/<name>/config.json) that
// say which hosts an API lives on and which credential token names stand in
// for which secret values. The proxy uses them to decide where a secret may
// travel; the server uses them to answer list_apis and to narrow a run's
// network allowlist.
package apis

import "slices"

// API is one configured API, after strict decoding and validation.
type API struct {
	// Name is the directory name under the APIs directory.
	Name        string
	Description string
	// Domains are exact host names (lower case, no scheme, port, path,
	// wildcard or IP literal) the API is served from.
	Domains []string
	// Credentials maps a token name (what sandbox code writes) to its real
	// value (already resolved from ${ENV} references). Never log values.
	Credentials map[string]string
	Reference   string
	// RestrictedMethods are upper-case HTTP methods the proxy refuses for
	// this API's hosts.
	RestrictedMethods []string
	Active            bool
	// TypesPath is the absolute path of types.d.ts beside config.json, or ""
	// when the API ships none.
	TypesPath string
	// ConfigPath is the absolute path of the config.json it was loaded from.
	ConfigPath string
}

// TokenNames returns the API's credential token names, sorted.
func (a *API) TokenNames() []string { return sortedKeys(a.Credentials) }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
