package testenv

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
)

// TestCALeafVerifies: a leaf verifies against its CA's pool for each of its
// names (wildcards included) and IP addresses, and for nothing else; another
// CA's pool does not trust it.
func TestCALeafVerifies(t *testing.T) {
	t.Parallel()
	ca := NewCA(t)
	pair, certPEM, keyPEM := ca.Leaf(t, "api.test", "*.codeforge.test", "127.0.0.1", "::1")
	if pair.Leaf == nil {
		t.Fatal("the pair's Leaf is not set")
	}
	if !ca.Cert.IsCA || ca.Cert.CheckSignatureFrom(ca.Cert) != nil {
		t.Fatalf("the CA certificate is not a self-signed CA (IsCA %v)", ca.Cert.IsCA)
	}
	if ca.Cert.SerialNumber.Cmp(pair.Leaf.SerialNumber) == 0 {
		t.Fatal("CA and leaf share a serial number")
	}
	for _, host := range []string{"api.test", "x.codeforge.test", "127.0.0.1", "::1"} {
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: ca.Pool()}); err != nil {
			t.Errorf("leaf for %s does not verify: %v", host, err)
		}
	}
	for _, host := range []string{"other.test", "codeforge.test", "a.b.codeforge.test", "127.0.0.2"} {
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: ca.Pool()}); err == nil {
			t.Errorf("leaf verifies for %s, which it does not name", host)
		}
	}
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: "api.test", Roots: NewCA(t).Pool()}); err == nil {
		t.Error("leaf verifies against another test CA")
	}

	// The PEM forms are the same pair, and a file-based server can load them.
	again, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("PEM pair: %v", err)
	}
	if !bytes.Equal(again.Certificate[0], pair.Certificate[0]) {
		t.Error("certPEM is not the pair's certificate")
	}
}

// TestCAHandshake: a real TLS server on loopback with a leaf is reached by
// a client trusting the CA, by name and by IP address, and refused by a
// client that does not trust it.
func TestCAHandshake(t *testing.T) {
	t.Parallel()
	ca := NewCA(t)
	pair, _, _ := ca.Leaf(t, "api.test", "127.0.0.1")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are expected
	srv.StartTLS()
	t.Cleanup(srv.Close)
	get := func(serverName string, roots *x509.CertPool) error {
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName}}}
		defer c.CloseIdleConnections()
		resp, err := c.Get(srv.URL)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	for _, name := range []string{"api.test", "127.0.0.1"} {
		if err := get(name, ca.Pool()); err != nil {
			t.Errorf("handshake as %s: %v", name, err)
		}
	}
	if err := get("other.test", ca.Pool()); err == nil {
		t.Error("handshake as other.test succeeded")
	}
	if err := get("api.test", x509.NewCertPool()); err == nil {
		t.Error("handshake without trusting the CA succeeded")
	}
}

// TestCAWritePEM: the written file is the CA certificate, and a pool
// loaded from it trusts the CA's leaves.
func TestCAWritePEM(t *testing.T) {
	t.Parallel()
	ca := NewCA(t)
	file := ca.WritePEM(t, t.TempDir())
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" || !bytes.Equal(block.Bytes, ca.Cert.Raw) {
		t.Fatalf("%s does not hold the CA certificate:\n%s", file, data)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		t.Fatalf("%s: no certificate", file)
	}
	pair, _, _ := ca.Leaf(t, "api.test")
	if _, err := pair.Leaf.Verify(x509.VerifyOptions{DNSName: "api.test", Roots: pool}); err != nil {
		t.Fatalf("leaf against the written CA: %v", err)
	}
}
