package testenv

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a throwaway certificate authority for tests: it signs the
// certificates of test TLS servers on loopback, and its certificate is what
// the client under test (the proxy, Deno, a sandbox) is told to trust.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	// PEM is Cert PEM-encoded, as a trust file holds it.
	PEM []byte
}

// caValidity is how long test certificates are valid; they start an hour
// in the past so that a clock a little behind still accepts them.
const caValidity = 24 * time.Hour

// NewCA makes a fresh self-signed CA (ECDSA P-256). It fails the test when
// the certificate cannot be made.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber:          serial(tb),
		Subject:               pkix.Name{CommonName: "codeforge test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		tb.Fatalf("test CA: create certificate: %v", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatalf("test CA: parse certificate: %v", err)
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// Leaf makes a server certificate signed by c for hosts: an IP literal
// becomes an IP address SAN, anything else (wildcards included) a DNS name
// SAN; the first host is also the subject's common name. It returns the
// pair for a tls.Config (Leaf set) and the certificate and its key as PEM,
// for a server in another process.
func (c *CA) Leaf(tb testing.TB, hosts ...string) (pair tls.Certificate, certPEM, keyPEM []byte) {
	tb.Helper()
	if len(hosts) == 0 {
		tb.Fatal("test CA: Leaf needs at least one host name or IP address")
	}
	key := newKey(tb)
	tmpl := &x509.Certificate{
		SerialNumber: serial(tb),
		Subject:      pkix.Name{CommonName: hosts[0]},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(caValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.Cert, key.Public(), c.Key)
	if err != nil {
		tb.Fatalf("test CA: create certificate for %v: %v", hosts, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatalf("test CA: marshal key: %v", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	pair, err = tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		tb.Fatalf("test CA: key pair for %v: %v", hosts, err)
	}
	return pair, certPEM, keyPEM
}

// Pool returns a new certificate pool trusting only c.
func (c *CA) Pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(c.Cert)
	return pool
}

// WritePEM writes c's certificate to dir/ca.pem and returns that path.
func (c *CA) WritePEM(tb testing.TB, dir string) string {
	tb.Helper()
	file := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(file, c.PEM, 0o644); err != nil {
		tb.Fatalf("test CA: %v", err)
	}
	return file
}

func newKey(tb testing.TB) *ecdsa.PrivateKey {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatalf("test CA: generate key: %v", err)
	}
	return key
}

// serial is a random 128-bit serial number, so certificates of different
// test CAs never share one.
func serial(tb testing.TB) *big.Int {
	tb.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		tb.Fatalf("test CA: serial number: %v", err)
	}
	return n
}
