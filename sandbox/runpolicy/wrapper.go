package runpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The wrapper's contract: codeforge-run is the one command the socket
// filter lets the server exec in the sandbox container.
//
//	codeforge-run            run the TypeScript read from stdin (settings in Env)
//	codeforge-run --kill ID  kill run ID's whole process group, remove its files
//	                         (a run still starting never starts deno)
//	codeforge-run --warm     start deno for the settings in Env, then wait on
//	                         stdin for a run (RunClaim's line, then the code)
//	codeforge-run --collect ID  write a tar of the entries directly in run ID's
//	                         out/ (kept by CODEFORGE_KEEP_OUT=1), then remove
//	                         its files; ExitNoSuchRun when there is no such run
//	codeforge-run --check    exit 0 iff deno starts and the proxy CA is present
//	codeforge-run --check IPV4:PORT
//	                         the same, and a TCP connection to the proxy at
//	                         IPV4:PORT opens within ProbeTimeout, as a run's
//	                         would; ExitNetworkDown when it does not (the
//	                         sandbox's network is down)
//	codeforge-run --idle     a keepalive that reaps orphans (PID 1 in tests)
//
// Its exit status is deno's (128+N when signal N ended deno, followed by
// a last stderr line SignalTrailer+N; a status above 128 that deno exited
// with by itself is followed by ExitTrailer+status), ExitRefused when it refuses to run
// (its message on stderr starts with MessagePrefix), and for --kill
// ExitNoSuchRun when no such run exists; --check IPV4:PORT exits with
// ExitNetworkDown when the sandbox cannot reach the proxy (its message
// starts with MessagePrefix+NetworkPrefix). A run with CODEFORGE_KEEP_OUT
// whose directory was kept for --collect (it has an out/) ends its stderr
// with a line KeptOutTrailer; without it there is nothing to collect.
const (
	WrapperName   = "codeforge-run"
	WrapperPath   = "/usr/local/bin/codeforge-run"
	MessagePrefix = "codeforge-run: "
	SignalTrailer = "codeforge-run: deno ended by signal "
	ExitTrailer   = "codeforge-run: deno exited with status "
	// KeptOutTrailer is the wrapper's last stderr line when it kept the
	// run's directory for --collect.
	KeptOutTrailer = "codeforge-run: out/ kept for --collect"
	ExitRefused    = 125
	ExitNoSuchRun  = 3
	// ExitNetworkDown is --check IPV4:PORT's status when the connection
	// to the proxy does not open.
	ExitNetworkDown = 4
	NetworkPrefix   = "network: "
	// ProbeTimeout bounds --check's connection to the proxy.
	ProbeTimeout = 2 * time.Second
	// ExitKilledBeforeStart is a run's status when --kill came first.
	ExitKilledBeforeStart = 137
)

// Paths inside the sandbox container.
const (
	SandboxDeno   = "/usr/local/bin/deno"
	SandboxRuns   = "/tmp/runs"
	SandboxSkills = "/skills"
	SandboxCA     = "/ca/ca.pem"
)

// Limits of the wrapper's settings.
const (
	MaxTimeout           = 24 * time.Hour
	MaxMemoryMB          = 999999
	SandboxMemoryMB      = 256 // default V8 heap cap in the sandbox container
	maxTimeoutFracDigits = 3
)

// The environment variables of a run's exec, in the order Env writes them.
const (
	EnvRunID      = "CODEFORGE_RUN_ID"
	EnvTimeout    = "CODEFORGE_TIMEOUT"
	EnvAllowNet   = "CODEFORGE_ALLOW_NET"
	EnvMemoryMB   = "CODEFORGE_MEMORY_MB"
	EnvRead       = "CODEFORGE_READ"
	EnvKeepOut    = "CODEFORGE_KEEP_OUT"
	EnvHTTPSProxy = "HTTPS_PROXY"
	EnvHTTPProxy  = "HTTP_PROXY"
)

// EnvKeys lists every variable a run's exec may set, in canonical order.
var EnvKeys = []string{EnvRunID, EnvTimeout, EnvAllowNet, EnvMemoryMB, EnvRead, EnvKeepOut, EnvHTTPSProxy, EnvHTTPProxy}

var (
	runIDPattern   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)
	timeoutPattern = regexp.MustCompile(`^[0-9]{1,5}(\.[0-9]{1,3})?$`)
	memoryPattern  = regexp.MustCompile(`^[1-9][0-9]{0,5}$`)
	// probeAddrPattern is the one argument --check may take: the proxy
	// as a run reaches it, an IPv4 literal and a port.
	probeAddrPattern = regexp.MustCompile(`^(?:(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9]):(?:[1-9][0-9]{0,4})$`)
)

// CheckProbeAddr says why addr cannot be --check's probe target (an
// IPv4 literal and a port, e.g. 192.0.2.1:3128: the proxy as a run
// reaches it).
func CheckProbeAddr(addr string) error {
	if !probeAddrPattern.MatchString(addr) {
		return fmt.Errorf("--check: %s is not IPV4:PORT", trim(addr))
	}
	return nil
}

// Run is one run's settings as the wrapper receives them.
type Run struct {
	ID        string
	Timeout   time.Duration // whole milliseconds, up to MaxTimeout
	Hosts     []string
	AllHosts  bool
	MemoryMB  int // 0: SandboxMemoryMB
	ReadPaths []string
	ProxyURL  string
	// KeepOut keeps the run's scratch directory after it ended by itself
	// with an out/ directory, for --collect (which, or --kill, removes
	// it).
	KeepOut bool
	// End is a warm run's end token (see EndPrefix) and NodeExit its
	// Claim.NodeExit: they come with the claim, never in an environment.
	// "" writes no end line.
	End      string
	NodeExit bool
}

// CheckRunID says why id cannot name a run.
func CheckRunID(id string) error {
	if !runIDPattern.MatchString(id) {
		return fmt.Errorf("%s is missing or not [A-Za-z0-9][A-Za-z0-9_-]{0,63}", EnvRunID)
	}
	return nil
}

// Check says what is wrong with r, naming the variable that carries it.
func (r Run) Check() error {
	if err := CheckRunID(r.ID); err != nil {
		return err
	}
	if r.Timeout <= 0 || r.Timeout > MaxTimeout {
		return fmt.Errorf("%s is missing or not a positive number of seconds (at most %d, up to 3 decimals)", EnvTimeout, int(MaxTimeout.Seconds()))
	}
	if r.MemoryMB < 0 || r.MemoryMB > MaxMemoryMB {
		return fmt.Errorf("%s is not a positive number of megabytes", EnvMemoryMB)
	}
	if r.AllHosts && len(r.Hosts) > 0 {
		return fmt.Errorf("%s is either \"*\" or a list of hosts, not both", EnvAllowNet)
	}
	for _, h := range r.Hosts {
		if err := CheckHost(h); err != nil {
			return fmt.Errorf("%s: %w", EnvAllowNet, err)
		}
	}
	for _, p := range r.ReadPaths {
		if err := checkPlainPath(p); err != nil {
			return fmt.Errorf("%s: %w", EnvRead, err)
		}
	}
	if r.ProxyURL != "" {
		if err := CheckProxyURL(r.ProxyURL); err != nil {
			return fmt.Errorf("%s/%s: %w", EnvHTTPSProxy, EnvHTTPProxy, err)
		}
	}
	return nil
}

// Env is r as the exec's environment, in canonical order; an error says
// which setting the wrapper would refuse.
func (r Run) Env() ([]string, error) {
	if err := r.Check(); err != nil {
		return nil, err
	}
	net := strings.Join(r.Hosts, ",")
	if r.AllHosts {
		net = "*"
	}
	env := []string{
		EnvRunID + "=" + r.ID,
		EnvTimeout + "=" + formatTimeout(r.Timeout),
		EnvAllowNet + "=" + net,
	}
	if r.MemoryMB != 0 {
		env = append(env, EnvMemoryMB+"="+strconv.Itoa(r.MemoryMB))
	}
	if len(r.ReadPaths) > 0 {
		env = append(env, EnvRead+"="+strings.Join(r.ReadPaths, ","))
	}
	if r.KeepOut {
		env = append(env, EnvKeepOut+"=1")
	}
	if r.ProxyURL != "" {
		env = append(env, EnvHTTPSProxy+"="+r.ProxyURL, EnvHTTPProxy+"="+r.ProxyURL)
	}
	return env, nil
}

// ParseEnv reads a run's settings from an exec environment strictly:
// each entry KEY=VALUE, each key one of EnvKeys and given at most once,
// each value of its exact form; the run ID and timeout are required.
// Messages never repeat a value (the proxy URLs hold the run's proxy
// credential).
func ParseEnv(env []string) (Run, error) {
	vals := map[string]string{}
	for i, e := range env {
		k, v, ok := strings.Cut(e, "=")
		if !ok {
			return Run{}, fmt.Errorf("Env entry %d is not KEY=VALUE", i)
		}
		if !isEnvKey(k) {
			return Run{}, fmt.Errorf("Env key %q is not allowed (allowed: %s)", trim(k), strings.Join(EnvKeys, ", "))
		}
		if _, dup := vals[k]; dup {
			return Run{}, fmt.Errorf("Env key %s is given twice", k)
		}
		vals[k] = v
	}
	var r Run
	r.ID = vals[EnvRunID]
	if err := CheckRunID(r.ID); err != nil {
		return Run{}, err
	}
	t, ok := vals[EnvTimeout]
	if !ok || !timeoutPattern.MatchString(t) {
		return Run{}, fmt.Errorf("%s is missing or not a positive number of seconds (at most %d, up to 3 decimals)", EnvTimeout, int(MaxTimeout.Seconds()))
	}
	r.Timeout = parseTimeout(t)
	if m, ok := vals[EnvMemoryMB]; ok {
		if !memoryPattern.MatchString(m) {
			return Run{}, fmt.Errorf("%s is not a positive number of megabytes", EnvMemoryMB)
		}
		r.MemoryMB, _ = strconv.Atoi(m)
	}
	switch net := vals[EnvAllowNet]; net {
	case "":
	case "*":
		r.AllHosts = true
	default:
		r.Hosts = strings.Split(net, ",")
		for _, h := range r.Hosts {
			if CheckHost(h) != nil {
				return Run{}, fmt.Errorf("%s is not \"\", \"*\" or a comma-separated list of hosts", EnvAllowNet)
			}
		}
	}
	if read, ok := vals[EnvRead]; ok && read != "" {
		r.ReadPaths = strings.Split(read, ",")
		for _, p := range r.ReadPaths {
			if checkPlainPath(p) != nil {
				return Run{}, fmt.Errorf("%s is not a comma-separated list of absolute paths of plain characters without '..'", EnvRead)
			}
		}
	}
	switch vals[EnvKeepOut] {
	case "":
	case "1":
		r.KeepOut = true
	default:
		return Run{}, fmt.Errorf("%s is not \"\" or \"1\"", EnvKeepOut)
	}
	hp, hasHTTPS := vals[EnvHTTPSProxy]
	p, hasHTTP := vals[EnvHTTPProxy]
	for _, kv := range [][2]string{{EnvHTTPSProxy, hp}, {EnvHTTPProxy, p}} {
		if _, ok := vals[kv[0]]; ok && CheckProxyURL(kv[1]) != nil {
			return Run{}, fmt.Errorf("%s is not an http(s) URL of plain characters", kv[0])
		}
	}
	switch {
	case hasHTTPS && hasHTTP && hp != p:
		return Run{}, fmt.Errorf("%s and %s differ: a run has one proxy identity", EnvHTTPSProxy, EnvHTTPProxy)
	case hasHTTPS:
		r.ProxyURL = hp
	case hasHTTP:
		r.ProxyURL = p
	}
	if err := r.Check(); err != nil {
		return Run{}, err
	}
	return r, nil
}

// Spec is the deno Spec of run r inside the sandbox container; caPresent
// says whether the proxy's CA certificate is there to trust.
func (r Run) Spec(caPresent bool) Spec {
	scratch := SandboxRuns + "/" + r.ID
	s := Spec{
		Scratch:   scratch,
		DenoDir:   CacheDir(scratch),
		Skills:    SandboxSkills,
		ReadPaths: r.ReadPaths,
		Hosts:     r.Hosts,
		AllHosts:  r.AllHosts,
		MemoryMB:  r.MemoryMB,
		ProxyURL:  r.ProxyURL,
	}
	if s.MemoryMB == 0 {
		s.MemoryMB = SandboxMemoryMB
	}
	if caPresent {
		s.CACert = SandboxCA
	}
	return s
}

func isEnvKey(k string) bool {
	for _, e := range EnvKeys {
		if e == k {
			return true
		}
	}
	return false
}

// formatTimeout writes d as seconds with at most three decimals, rounded
// up to the millisecond.
func formatTimeout(d time.Duration) string {
	ms := int64((d + time.Millisecond - 1) / time.Millisecond)
	s := strconv.FormatInt(ms/1000, 10)
	if frac := ms % 1000; frac != 0 {
		s += strings.TrimRight(fmt.Sprintf(".%03d", frac), "0")
	}
	return s
}

// RoundTimeout is d rounded up to the millisecond, as the wrapper gets it.
func RoundTimeout(d time.Duration) time.Duration {
	return (d + time.Millisecond - 1) / time.Millisecond * time.Millisecond
}

// parseTimeout reads a value that matched timeoutPattern.
func parseTimeout(s string) time.Duration {
	ip, fp, _ := strings.Cut(s, ".")
	sec, _ := strconv.ParseInt(ip, 10, 64)
	ms := int64(0)
	if fp != "" {
		fp += strings.Repeat("0", maxTimeoutFracDigits-len(fp))
		ms, _ = strconv.ParseInt(fp, 10, 64)
	}
	return time.Duration(sec)*time.Second + time.Duration(ms)*time.Millisecond
}

// ErrUsage is the wrapper's answer to arguments it does not know.
var ErrUsage = errors.New("usage: codeforge-run [--warm | --kill RUN_ID | --collect RUN_ID | --check [IPV4:PORT] | --idle] (code on stdin, settings in CODEFORGE_* variables)")

func trim(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// A warm exec (codeforge-run --warm) is created with WarmEnv, the
// settings that fix its deno's permissions (the filter checks them like a
// run's), and waits. The run that takes it sends RunClaim's line on its
// stdin, then the code. The wrapper refuses a claim its deno does not
// cover (Covers): what comes on stdin can only narrow what the filter let
// through.

// WarmEnv is r's environment for a warm exec: r.Env without the timeout
// and proxy, which come with the claim.
func (r Run) WarmEnv() ([]string, error) {
	if r.ProxyURL != "" || r.Timeout != 0 || r.KeepOut {
		return nil, errors.New("a warm exec's settings have no timeout, proxy or keep-out: those come with its run")
	}
	r.Timeout = time.Second
	env, err := r.Env()
	if err != nil {
		return nil, err
	}
	out := env[:0]
	for _, e := range env {
		if !strings.HasPrefix(e, EnvTimeout+"=") {
			out = append(out, e)
		}
	}
	return out, nil
}

// ParseWarmEnv reads a warm exec's settings as ParseEnv does; a timeout
// or proxy is refused.
func ParseWarmEnv(env []string) (Run, error) {
	for _, e := range env {
		k, _, _ := strings.Cut(e, "=")
		if k == EnvTimeout || k == EnvHTTPSProxy || k == EnvHTTPProxy || k == EnvKeepOut {
			return Run{}, fmt.Errorf("Env key %s is not allowed for a warm exec: it comes with the run", k)
		}
	}
	r, err := ParseEnv(append(slices.Clone(env), EnvTimeout+"=1"))
	if err != nil {
		return Run{}, err
	}
	r.Timeout = 0
	return r, nil
}

// RunClaim is the first line a warm exec reads: the run's own settings.
type RunClaim struct {
	TimeoutMS int64    `json:"timeout_ms"`
	Hosts     []string `json:"hosts,omitempty"`
	AllHosts  bool     `json:"all_hosts,omitempty"`
	ReadPaths []string `json:"read_paths,omitempty"`
	ProxyURL  string   `json:"proxy,omitempty"`
	KeepOut   bool     `json:"keep_out,omitempty"`
	End       string   `json:"end,omitempty"`
	NodeExit  bool     `json:"node_exit,omitempty"`
}

// MaxClaimLine bounds the claim line a warm exec reads.
const MaxClaimLine = 64 << 10

// NewRunClaim is run's claim (its ID and memory are the warm exec's).
func NewRunClaim(run Run) RunClaim {
	return RunClaim{
		TimeoutMS: int64(RoundTimeout(run.Timeout) / time.Millisecond),
		Hosts:     run.Hosts, AllHosts: run.AllHosts, ReadPaths: run.ReadPaths, ProxyURL: run.ProxyURL,
		KeepOut: run.KeepOut, End: run.End, NodeExit: run.NodeExit,
	}
}

// Line is c as one line.
func (c RunClaim) Line() ([]byte, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encode run claim: %w", err)
	}
	return append(b, '\n'), nil
}

// ParseRunClaim reads a claim line for the warm run warm (which gives its
// ID and memory) and checks it like the environment of a run.
func ParseRunClaim(line []byte, warm Run) (Run, error) {
	var c RunClaim
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Run{}, fmt.Errorf("run claim: %v", err)
	}
	r := Run{ID: warm.ID, MemoryMB: warm.MemoryMB, Timeout: time.Duration(c.TimeoutMS) * time.Millisecond,
		Hosts: c.Hosts, AllHosts: c.AllHosts, ReadPaths: c.ReadPaths, ProxyURL: c.ProxyURL, KeepOut: c.KeepOut, End: c.End, NodeExit: c.NodeExit}
	if err := r.Check(); err != nil {
		return Run{}, fmt.Errorf("run claim: %w", err)
	}
	if c.End != "" {
		if err := CheckEndToken(c.End); err != nil {
			return Run{}, fmt.Errorf("run claim: %w", err)
		}
	}
	return r, nil
}
