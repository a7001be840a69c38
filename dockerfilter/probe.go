package dockerfilter

import "regexp"

// probeTargetPattern is the one argument `codeforge-run --check` may take
// besides none: the address (IPv4 literal and port) of the proxy as a run
// reaches it, which the check then connects to as the run user would (the
// sandbox → proxy path the server's /health reports on). It is the only
// form of --check the filter lets through with an argument; nothing the
// code could not already do in a run (a TCP connect as the sandbox user).
var probeTargetPattern = regexp.MustCompile(`^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9]):(?:[1-9][0-9]{0,4})$`)

// checkWithProbe reports whether cmd is [WrapperName, "--check", ADDR:PORT].
func checkWithProbe(cmd []string) bool {
	return len(cmd) == 3 && cmd[0] == WrapperName && cmd[1] == "--check" && probeTargetPattern.MatchString(cmd[2])
}

// ValidProbeTarget reports whether addr is an address `codeforge-run
// --check` may probe through the filter (IPv4 literal and port).
func ValidProbeTarget(addr string) bool { return probeTargetPattern.MatchString(addr) }
