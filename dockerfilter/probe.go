package dockerfilter

import "github.com/codeforge/codeforge/sandbox/runpolicy"

// The one argument `codeforge-run --check` may take besides none is the
// address (IPv4 literal and port) of the proxy as a run reaches it, which
// the check then connects to as the run user would (the sandbox → proxy
// path the server's /health reports on); its form is the run policy's
// (runpolicy.CheckProbeAddr). It is the only form of --check the filter
// lets through with an argument; nothing the code could not already do in
// a run (a TCP connect as the sandbox user).

// checkWithProbe reports whether cmd is [WrapperName, "--check", ADDR:PORT].
func checkWithProbe(cmd []string) bool {
	return len(cmd) == 3 && cmd[0] == WrapperName && cmd[1] == "--check" && ValidProbeTarget(cmd[2])
}

// ValidProbeTarget reports whether addr is an address `codeforge-run
// --check` may probe through the filter (IPv4 literal and port).
func ValidProbeTarget(addr string) bool { return runpolicy.CheckProbeAddr(addr) == nil }
