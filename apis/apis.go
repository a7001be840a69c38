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
	// AllowedMethods, when non-nil, are the only upper-case HTTP methods
	// the proxy lets through to this API's hosts (exclusive with
	// RestrictedMethods).
	AllowedMethods []string
	// SubstituteIn are the request parts (Place* constants, sorted) in
	// which the proxy replaces token names with values; never empty.
	SubstituteIn []string
	// Ports are the HTTPS ports credentials may be sent to, sorted.
	Ports  []int
	Active bool
	// TypesPath is the absolute path of types.d.ts beside config.json, or ""
	// when the API ships none.
	TypesPath string
	// ConfigPath is the absolute path of the config.json it was loaded from.
	ConfigPath string
}

// The places of a request in which credentials can be substituted
// (Config.SubstituteIn).
const (
	PlaceHeaders = "headers"
	PlaceQuery   = "query"
	PlacePath    = "path"
	PlaceBody    = "body"
)

// Places lists every valid place, in documentation order.
var Places = []string{PlaceHeaders, PlaceQuery, PlacePath, PlaceBody}

// SubstitutesIn reports whether the API opted in to credentials in place.
func (a *API) SubstitutesIn(place string) bool { return slices.Contains(a.SubstituteIn, place) }

// AllowsPort reports whether credentials may be sent to port.
func (a *API) AllowsPort(port int) bool { return slices.Contains(a.Ports, port) }

// MethodAllowed reports whether the API's method rules let method (upper
// case) through: not restricted, and allowed when AllowedMethods is set.
func (a *API) MethodAllowed(method string) bool {
	if a.AllowedMethods != nil {
		return slices.Contains(a.AllowedMethods, method)
	}
	return !slices.Contains(a.RestrictedMethods, method)
}

// HasMethodRules reports whether the API limits methods at all.
func (a *API) HasMethodRules() bool { return a.AllowedMethods != nil || len(a.RestrictedMethods) > 0 }

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
