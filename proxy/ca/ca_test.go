package ca

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustLoad(t *testing.T, dir string) *CA {
	t.Helper()
	c, err := LoadOrCreate(dir)
	if err != nil {
		t.Fatalf("LoadOrCreate(%s): %v", dir, err)
	}
	return c
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func TestCreateThenReuse(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "ca")
	c := mustLoad(t, dir)
	if m := mode(t, dir); m != 0o700 {
		t.Errorf("dir mode %04o; want 0700", m)
	}
	if m := mode(t, filepath.Join(dir, "ca.key")); m != 0o600 {
		t.Errorf("ca.key mode %04o; want 0600", m)
	}
	if m := mode(t, filepath.Join(dir, "ca.pem")); m != 0o644 {
		t.Errorf("ca.pem mode %04o; want 0644", m)
	}
	if c.CertFile() != filepath.Join(dir, "ca.pem") {
		t.Errorf("CertFile = %s", c.CertFile())
	}
	onDisk, err := os.ReadFile(c.CertFile())
	if err != nil || !bytes.Equal(onDisk, c.CertPEM()) {
		t.Fatalf("ca.pem differs from CertPEM (err %v)", err)
	}
	cert := c.Certificate()
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("CA key is %T; want ECDSA P-256", cert.PublicKey)
	}
	if !cert.IsCA || !cert.MaxPathLenZero || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("CA certificate lacks CA constraints: IsCA=%v MaxPathLenZero=%v usage=%v", cert.IsCA, cert.MaxPathLenZero, cert.KeyUsage)
	}
	if err := cert.CheckSignatureFrom(cert); err != nil {
		t.Errorf("CA certificate is not self-signed: %v", err)
	}

	again := mustLoad(t, dir)
	if !bytes.Equal(again.CertPEM(), c.CertPEM()) {
		t.Fatal("a second LoadOrCreate made a new CA instead of reusing the existing one")
	}
	// A leaf from the first instance verifies against the reloaded root.
	lf, err := c.Leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	verifyLeaf(t, again, lf, "api.test")
}

func TestConcurrentCreateSharesOneCA(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "ca")
	const n = 8
	pems := make([][]byte, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := LoadOrCreate(dir)
			errs[i] = err
			if err == nil {
				pems[i] = c.CertPEM()
			}
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("LoadOrCreate %d: %v", i, errs[i])
		}
		if !bytes.Equal(pems[i], pems[0]) {
			t.Fatalf("concurrent LoadOrCreate %d got a different CA", i)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Errorf("dir holds %d entries; want ca.key and ca.pem only (temp files left behind?)", len(entries))
	}
}

func TestKeyWithoutCertGetsCertFromThatKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := mustLoad(t, dir)
	if err := os.Remove(first.CertFile()); err != nil {
		t.Fatal(err)
	}
	second := mustLoad(t, dir)
	if !second.Certificate().PublicKey.(*ecdsa.PublicKey).Equal(first.Certificate().PublicKey) {
		t.Fatal("recreated certificate does not use the existing key")
	}
}

func TestLoadRefusesBadFilesAndChangesNothing(t *testing.T) {
	t.Parallel()
	otherKey := func(t *testing.T) []byte {
		b, err := os.ReadFile(filepath.Join(mustLoad(t, t.TempDir()).CertFile()))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	tests := []struct {
		name  string
		spoil func(t *testing.T, dir string)
		want  string
	}{
		{"key readable by others", func(t *testing.T, dir string) {
			if err := os.Chmod(filepath.Join(dir, "ca.key"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "chmod 600"},
		{"key not PEM", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "ca.key"), []byte("not a key"), 0o600)
		}, "no PEM"},
		{"cert from another CA", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "ca.pem"), otherKey(t), 0o644)
		}, "does not belong"},
		{"cert not PEM", func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "ca.pem"), []byte("junk"), 0o644)
		}, "no PEM certificate"},
		{"cert without key", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "ca.key")); err != nil {
				t.Fatal(err)
			}
		}, "but no ca.key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			mustLoad(t, dir)
			tt.spoil(t, dir)
			before := snapshot(t, dir)
			c, err := LoadOrCreate(dir)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("LoadOrCreate = %v, %v; want an error containing %q", c, err, tt.want)
			}
			if after := snapshot(t, dir); after != before {
				t.Errorf("a refused load changed the directory:\nbefore %s\nafter  %s", before, after)
			}
		})
	}
	if _, err := LoadOrCreate(""); err == nil {
		t.Error("LoadOrCreate(\"\") succeeded; want an error")
	}
}

func writeFile(t *testing.T, path string, data []byte, m os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, m); err != nil {
		t.Fatal(err)
	}
}

// snapshot lists a directory's files with their modes and contents.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		data, _ := os.ReadFile(p)
		fmt.Fprintf(&b, "%s %04o %x; ", e.Name(), mode(t, p), data)
	}
	return b.String()
}

func verifyLeaf(t *testing.T, c *CA, lf *tls.Certificate, host string) {
	t.Helper()
	roots := x509.NewCertPool()
	roots.AddCert(c.Certificate())
	inter := x509.NewCertPool()
	for _, der := range lf.Certificate[1:] {
		ic, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		inter.AddCert(ic)
	}
	_, err := lf.Leaf.Verify(x509.VerifyOptions{
		DNSName:       host,
		Roots:         roots,
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		t.Fatalf("leaf for %s does not verify against the CA: %v", host, err)
	}
}

func TestLeafVerifiesForNamesAndIPs(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, t.TempDir())
	tests := []struct{ in, verifyAs string }{
		{"api.test", "api.test"},
		{"API.Example.TEST.", "api.example.test"},
		{"127.0.0.1", "127.0.0.1"},
		{"::1", "::1"},
		{"[2001:db8::7]", "2001:db8::7"},
		{"::ffff:10.0.0.1", "10.0.0.1"},
		{"under_score.test", "under_score.test"},
	}
	for _, tt := range tests {
		lf, err := c.Leaf(tt.in)
		if err != nil {
			t.Fatalf("Leaf(%q): %v", tt.in, err)
		}
		verifyLeaf(t, c, lf, tt.verifyAs)
		if _, ok := lf.PrivateKey.(*ecdsa.PrivateKey); !ok {
			t.Errorf("leaf key is %T; want ECDSA", lf.PrivateKey)
		}
		if v := time.Until(lf.Leaf.NotAfter); v < 23*time.Hour || v > 25*time.Hour {
			t.Errorf("leaf for %s valid for %v more; want about 24h", tt.in, v)
		}
		if len(lf.Leaf.IPAddresses)+len(lf.Leaf.DNSNames) != 1 {
			t.Errorf("leaf for %s has SANs %v %v; want exactly the host", tt.in, lf.Leaf.DNSNames, lf.Leaf.IPAddresses)
		}
	}
	// A leaf for one host is not good for another.
	lf, _ := c.Leaf("api.test")
	if err := lf.Leaf.VerifyHostname("evil.test"); err == nil {
		t.Error("leaf for api.test verified for evil.test")
	}
}

func TestLeafRejectsBadHosts(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, t.TempDir())
	for _, h := range []string{"", ".", "a..b", "exa mple.test", "fe80::1%eth0", "host:443", strings.Repeat("a", 64) + ".test", "*.test", "a/b"} {
		if lf, err := c.Leaf(h); err == nil {
			t.Errorf("Leaf(%q) = %v; want an error", h, lf.Leaf.DNSNames)
		}
	}
	if c.lru.Len() != 0 {
		t.Errorf("bad hosts left %d cache entries", c.lru.Len())
	}
}

func TestLeafTLSHandshake(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, t.TempDir())
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: c.GetCertificate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				conn.(*tls.Conn).Handshake()
				conn.Write([]byte("hello"))
			}()
		}
	}()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(c.CertPEM()) {
		t.Fatal("CertPEM does not parse")
	}
	d := tls.Dialer{Config: &tls.Config{RootCAs: roots, ServerName: "api.test"}}
	conn, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("TLS handshake with a minted leaf: %v", err)
	}
	buf := make([]byte, 5)
	if _, err := conn.Read(buf); err != nil || string(buf) != "hello" {
		t.Errorf("read %q, %v", buf, err)
	}
	conn.Close()

	// Without SNI there is no name to mint for.
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	noSNI := tls.Client(raw, &tls.Config{RootCAs: roots, InsecureSkipVerify: true})
	if err := noSNI.Handshake(); err == nil {
		t.Error("handshake without SNI succeeded; want the server to refuse")
	}
	noSNI.Close()
}

func TestLeafCache(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, t.TempDir())
	a1, _ := c.Leaf("a.test")
	a2, _ := c.Leaf("A.TEST.")
	b, _ := c.Leaf("b.test")
	if a1 != a2 {
		t.Error("same host (different spelling) minted twice")
	}
	if a1 == b {
		t.Error("different hosts share a leaf")
	}

	// Near expiry a leaf is replaced.
	c.now = func() time.Time { return time.Now().Add(leafValidity - leafRenew/2) }
	a3, _ := c.Leaf("a.test")
	if a3 == a1 {
		t.Error("a leaf within leafRenew of expiry was served from cache")
	}
	c.now = time.Now

	// The cache is bounded; the least recently used entry goes.
	for i := range maxLeaves {
		if _, err := c.Leaf(fmt.Sprintf("h%d.test", i)); err != nil {
			t.Fatal(err)
		}
	}
	if c.lru.Len() != maxLeaves || len(c.leaves) != maxLeaves {
		t.Fatalf("cache holds %d/%d entries; want %d", c.lru.Len(), len(c.leaves), maxLeaves)
	}
	if _, ok := c.leaves["a.test"]; ok {
		t.Error("least recently used entry survived a full cache")
	}
	if _, ok := c.leaves[fmt.Sprintf("h%d.test", maxLeaves-1)]; !ok {
		t.Error("most recent entry was evicted")
	}
}

func TestLeafConcurrentSameHostMintsOnce(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, t.TempDir())
	const n = 64
	got := make([]*tls.Certificate, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			lf, err := c.Leaf("busy.test")
			if err != nil {
				t.Error(err)
			}
			got[i] = lf
		})
	}
	close(start)
	wg.Wait()
	for i := range n {
		if got[i] != got[0] {
			t.Fatalf("call %d got a different certificate: the host was minted more than once", i)
		}
	}
}

func TestWriteCertTo(t *testing.T) {
	t.Parallel()
	c := mustLoad(t, t.TempDir())
	out := filepath.Join(t.TempDir(), "shared-ca.pem")
	writeFile(t, out, []byte("stale"), 0o600)
	if err := c.WriteCertTo(out); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(out)
	if err != nil || !bytes.Equal(data, c.CertPEM()) {
		t.Fatalf("published certificate differs (err %v)", err)
	}
	if m := mode(t, out); m != 0o644 {
		t.Errorf("published mode %04o; want 0644", m)
	}
	if err := c.WriteCertTo(filepath.Join(t.TempDir(), "missing", "ca.pem")); err == nil {
		t.Error("WriteCertTo into a missing directory succeeded; want an error")
	}
}

func BenchmarkLeafMint(b *testing.B) {
	c, err := LoadOrCreate(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		if _, err := c.Leaf(fmt.Sprintf("h%d.test", i)); err != nil {
			b.Fatal(err)
		}
	}
}
