//go:build !race

package proxy

// raceDetector is true when the tests run under -race, which slows
// byte-by-byte scanning about tenfold.
const raceDetector = false
