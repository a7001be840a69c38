// Package bench holds the proxy's performance benchmarks (and a test that
// keeps their harness honest): per-request latency the proxy adds to small
// HTTPS requests on loopback, and its memory while a large body streams
// through it with credential substitution on. It has no non-test code.
//
//	go test -run='^$' -bench=. -benchtime=2000x ./proxy/bench
//
// The comparison with a Python mitmproxy doing the same substitution is a
// command of its own, vsmitm (go run ./proxy/bench/vsmitm).
package bench
