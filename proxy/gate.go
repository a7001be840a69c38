package proxy

import "github.com/codeforge/codeforge/proxy/gate"

// The run contract lives in proxy/gate, which the server imports without
// linking the proxy; these aliases keep the proxy's own code and its
// callers reading proxy.NetEntry and so on. The in-process *Proxy
// implements Gate for the local backend; *ControlClient implements it
// against a proxy in another container.
type (
	RunSpec       = gate.RunSpec
	NetEntry      = gate.NetEntry
	Gate          = gate.Gate
	Run           = gate.Run
	SharedLogGate = gate.SharedLogGate
)
