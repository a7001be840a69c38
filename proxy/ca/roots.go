package ca

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
)

// LoadUpstreamRoots returns the system roots plus every certificate in the
// PEM file: the pool the proxy verifies upstream APIs with (private APIs
// with their own CA). It is strict, for the in-process proxy of `serve`
// and for `codeforge proxy` alike: a file without a certificate, or with a
// CERTIFICATE block that does not parse, is an error naming the block, so
// a broken file never quietly trusts less (or other) than it says.
// Blocks of other types (a key kept beside the certificates) are skipped.
func LoadUpstreamRoots(file string) (*x509.CertPool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	n := 0
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: certificate %d: %w", file, n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, fmt.Errorf("%s: %w", file, errNoCertificate)
	}
	return pool, nil
}

var errNoCertificate = errors.New("no PEM certificates found; want one or more -----BEGIN CERTIFICATE----- blocks")
