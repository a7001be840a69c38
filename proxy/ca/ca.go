// Package ca is the proxy's private certificate authority: it creates (or
// reuses) an ECDSA P-256 root kept in a directory only its owner can read,
// and mints short-lived leaf certificates per host for TLS interception.
// The sandbox trusts the root's certificate (ca.pem) and nothing else of it.
package ca

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

const (
	keyName  = "ca.key"
	certName = "ca.pem"

	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 24 * time.Hour
	// leafRenew is how long before expiry a cached leaf is replaced.
	leafRenew = time.Hour
	// backdate covers clock skew between the proxy and the sandbox.
	backdate = time.Hour
	// maxLeaves bounds the leaf cache; the least recently used goes first.
	maxLeaves = 1024
)

// CA is a loaded certificate authority. It is safe for concurrent use.
type CA struct {
	cert     *x509.Certificate
	certPEM  []byte
	key      *ecdsa.PrivateKey
	certFile string
	now      func() time.Time

	mu     sync.Mutex
	leaves map[string]*list.Element // host -> element holding *leaf
	lru    *list.List               // front = most recently used
}

// leaf is one cache entry. ready closes when cert/err are set, so callers
// asking for the same host while it is being minted wait for that one.
type leaf struct {
	host  string
	ready chan struct{}
	cert  *tls.Certificate
	err   error
}

// LoadOrCreate loads the CA in dir (ca.key, ca.pem), creating dir (mode
// 0700) and a new CA when there is none. The key file is written 0600 and
// refused if anyone but its owner can read it. Two processes racing to
// create the CA end up sharing the one that was written first.
func LoadOrCreate(dir string) (*CA, error) {
	if dir == "" {
		return nil, errors.New("ca: empty directory: give the directory that holds (or will hold) ca.key and ca.pem")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ca: create directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ca: restrict directory: %w", err)
	}
	_, keyErr := os.Lstat(filepath.Join(dir, keyName))
	_, certErr := os.Lstat(filepath.Join(dir, certName))
	if errors.Is(keyErr, fs.ErrNotExist) && certErr == nil {
		return nil, fmt.Errorf("ca: %s has %s but no %s: restore the key, or remove %s to create a new CA (sandboxes must then trust the new one)",
			dir, certName, keyName, certName)
	}
	key, err := loadOrCreateKey(dir)
	if err != nil {
		return nil, err
	}
	cert, certPEM, err := loadOrCreateCert(dir, key)
	if err != nil {
		return nil, err
	}
	return &CA{
		cert:     cert,
		certPEM:  certPEM,
		key:      key,
		certFile: filepath.Join(dir, certName),
		now:      time.Now,
		leaves:   map[string]*list.Element{},
		lru:      list.New(),
	}, nil
}

func loadOrCreateKey(dir string) (*ecdsa.PrivateKey, error) {
	path := filepath.Join(dir, keyName)
	key, err := readKey(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return key, err
	}
	key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca: generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("ca: encode key: %w", err)
	}
	data := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	created, err := publishNew(path, data, 0o600)
	if err != nil {
		return nil, fmt.Errorf("ca: write %s: %w", path, err)
	}
	if !created {
		// Another process got there first; use its key.
		return readKey(path)
	}
	return key, nil
}

func readKey(path string) (*ecdsa.PrivateKey, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err // fs.ErrNotExist is the caller's cue to create one
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("ca: %s is readable by others (mode %04o): run chmod 600 on it", path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("ca: read key: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("ca: %s holds no PEM \"PRIVATE KEY\" block: remove it (and %s) to create a new CA", path, certName)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("ca: parse %s: %w", path, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("ca: %s is not an ECDSA P-256 key: remove it (and %s) to create a new CA", path, certName)
	}
	return key, nil
}

func loadOrCreateCert(dir string, key *ecdsa.PrivateKey) (*x509.Certificate, []byte, error) {
	path := filepath.Join(dir, certName)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		// A key without a certificate (say, a crash between the two
		// writes) gets a certificate made from that key.
		data, err = newCACert(key)
		if err != nil {
			return nil, nil, err
		}
		if _, err := publishNew(path, data, 0o644); err != nil {
			return nil, nil, fmt.Errorf("ca: write %s: %w", path, err)
		}
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("ca: read certificate: %w", err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("ca: %s holds no PEM certificate: remove it to make a new one from %s", path, keyName)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("ca: parse %s: %w", path, err)
	}
	if pub, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || !pub.Equal(&key.PublicKey) {
		return nil, nil, fmt.Errorf("ca: %s does not belong to %s: remove %s to make a new one from the key", path, keyName, certName)
	}
	if !cert.IsCA {
		return nil, nil, fmt.Errorf("ca: %s is not a CA certificate: remove it to make a new one", path)
	}
	if time.Now().After(cert.NotAfter) {
		return nil, nil, fmt.Errorf("ca: %s expired on %s: remove it to make a new one", path, cert.NotAfter.Format(time.DateOnly))
	}
	return cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), nil
}

func newCACert(key *ecdsa.PrivateKey) ([]byte, error) {
	now := time.Now()
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("ca: encode public key: %w", err)
	}
	ski := sha256.Sum256(pubDER)
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: "CodeForge proxy CA", Organization: []string{"CodeForge"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
		SubjectKeyId:          ski[:20],
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("ca: create certificate: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

func randomSerial() *big.Int {
	// 128 random bits; rand.Int only fails if the system's source does,
	// and then nothing else here would work either.
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic(fmt.Sprintf("ca: read random: %v", err))
	}
	return n.Add(n, big.NewInt(1))
}

// publishNew writes data to path only if path does not exist yet, so that
// a file somebody else wrote meanwhile is never replaced. The file appears
// complete or not at all. created is false when path already existed.
func publishNew(path string, data []byte, mode os.FileMode) (created bool, err error) {
	tmp, err := writeTemp(path, data, mode)
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// writeTemp writes data, synced, to a new temporary file beside path.
func writeTemp(path string, data []byte, mode os.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return "", err
	}
	name := f.Name()
	fail := func(err error) (string, error) {
		f.Close()
		os.Remove(name)
		return "", err
	}
	if err := f.Chmod(mode); err != nil {
		return fail(err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(name)
		return "", err
	}
	return name, nil
}

// CertPEM returns the CA certificate in PEM form.
func (c *CA) CertPEM() []byte { return append([]byte(nil), c.certPEM...) }

// CertFile returns the path of ca.pem in the CA directory.
func (c *CA) CertFile() string { return c.certFile }

// Certificate returns the parsed CA certificate. Callers must not modify it.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// WriteCertTo publishes the CA certificate at path (mode 0644), replacing
// any file there atomically, e.g. in a volume the sandbox mounts. The
// directory must exist.
func (c *CA) WriteCertTo(path string) error {
	tmp, err := writeTemp(path, c.certPEM, 0o644)
	if err != nil {
		return fmt.Errorf("ca: write certificate to %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("ca: write certificate to %s: %w", path, err)
	}
	return nil
}

// GetCertificate is a tls.Config.GetCertificate that mints a leaf for the
// client's server name (SNI).
func (c *CA) GetCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if hello.ServerName == "" {
		return nil, errors.New("ca: client sent no server name (SNI); connect by host name")
	}
	return c.Leaf(hello.ServerName)
}

// Leaf returns a certificate for host (a DNS name or an IP address; an
// IP gets an IP SAN) signed by the CA, valid for about a day, with the CA
// certificate as the rest of its chain. Leaves are cached per host (the
// 1024 most recently used); concurrent calls for one host mint it once.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	name, ip, err := normalizeHost(host)
	if err != nil {
		return nil, err
	}
	now := c.now()
	c.mu.Lock()
	if el, ok := c.leaves[name]; ok {
		lf := el.Value.(*leaf)
		select {
		case <-lf.ready:
			if lf.err == nil && now.Before(lf.cert.Leaf.NotAfter.Add(-leafRenew)) {
				c.lru.MoveToFront(el)
				c.mu.Unlock()
				return lf.cert, nil
			}
			// Expiring (or failed): drop it and mint anew below.
			c.lru.Remove(el)
			delete(c.leaves, name)
		default:
			c.lru.MoveToFront(el)
			c.mu.Unlock()
			<-lf.ready
			return lf.cert, lf.err
		}
	}
	lf := &leaf{host: name, ready: make(chan struct{})}
	c.leaves[name] = c.lru.PushFront(lf)
	for c.lru.Len() > maxLeaves {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.leaves, old.Value.(*leaf).host)
	}
	c.mu.Unlock()

	lf.cert, lf.err = c.mint(name, ip, now)
	close(lf.ready)
	if lf.err != nil {
		c.mu.Lock()
		if el, ok := c.leaves[name]; ok && el.Value == lf {
			c.lru.Remove(el)
			delete(c.leaves, name)
		}
		c.mu.Unlock()
	}
	return lf.cert, lf.err
}

// normalizeHost lowercases host, drops a trailing dot and IPv6 brackets,
// and says whether it is an IP address.
func normalizeHost(host string) (string, netip.Addr, error) {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return "", netip.Addr{}, fmt.Errorf("ca: host %q has an IPv6 zone; give the address without %%zone", host)
		}
		ip = ip.Unmap()
		return ip.String(), ip, nil
	}
	if h == "" || len(h) > 253 {
		return "", netip.Addr{}, fmt.Errorf("ca: invalid host %q: want a DNS name or an IP address", host)
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return "", netip.Addr{}, fmt.Errorf("ca: invalid host %q: empty or over-long label", host)
		}
		for i := 0; i < len(label); i++ {
			ch := label[i]
			ok := ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_'
			if !ok {
				return "", netip.Addr{}, fmt.Errorf("ca: invalid host %q: %q is not allowed in a DNS name", host, ch)
			}
		}
	}
	return h, netip.Addr{}, nil
}

func (c *CA) mint(name string, ip netip.Addr, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ca: generate leaf key: %w", err)
	}
	notAfter := now.Add(leafValidity)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-backdate),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		AuthorityKeyId:        c.cert.SubjectKeyId,
	}
	if ip.IsValid() {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("ca: sign leaf for %s: %w", name, err)
	}
	parsed, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("ca: parse leaf for %s: %w", name, err)
	}
	return &tls.Certificate{
		Certificate: [][]byte{der, c.cert.Raw},
		PrivateKey:  key,
		Leaf:        parsed,
	}, nil
}
