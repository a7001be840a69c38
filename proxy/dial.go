package proxy

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
)

// privateDestError says every address a host resolved to is one the proxy
// refuses to dial.
type privateDestError struct {
	host string
	addr netip.Addr
}

func (e *privateDestError) Error() string {
	return fmt.Sprintf("%s resolves to non-public address %s", e.host, e.addr)
}

// dialContext resolves the host itself, checks every address it would
// dial, and dials exactly the address it checked (no second lookup, so no
// rebinding between check and use). In transparent mode the request
// context pins the addresses.
func (p *Proxy) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("dial %s: bad port", addr)
	}
	var addrs []netip.Addr
	if pinned, ok := ctx.Value(pinnedKey).([]netip.Addr); ok && len(pinned) > 0 {
		addrs = pinned
	} else if ip, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{ip}
	} else {
		addrs, err = p.resolve(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("resolve %s: %w", host, err)
		}
		if len(addrs) == 0 {
			return nil, fmt.Errorf("resolve %s: no addresses", host)
		}
	}
	var refused *privateDestError
	var lastErr error
	for _, a := range addrs {
		a = a.Unmap()
		if !p.private && !publicAddr(a) {
			if refused == nil {
				refused = &privateDestError{host: host, addr: a}
			}
			continue
		}
		c, err := p.dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	if lastErr != nil {
		return nil, lastErr
	}
	return nil, refused
}

// decodeBody undoes the listed content codings (applied in order, so
// removed in reverse). The decoders read their headers now, so a body that
// is not what it claims fails before the response is sent.
func decodeBody(body io.Reader, encodings []string) (io.Reader, error) {
	r := body
	for i := len(encodings) - 1; i >= 0; i-- {
		switch encodings[i] {
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(r)
			if errors.Is(err, io.EOF) {
				return eofReader{}, nil // an empty body, nothing to decode
			}
			if err != nil {
				return nil, fmt.Errorf("gzip: %w", err)
			}
			r = zr
		case "deflate":
			// HTTP's deflate is zlib-wrapped, but some servers send raw
			// deflate; the zlib header tells them apart.
			br := bufio.NewReader(r)
			head, err := br.Peek(2)
			if len(head) == 0 && errors.Is(err, io.EOF) {
				return eofReader{}, nil
			}
			if len(head) == 2 && head[0]&0x0f == 8 && (uint16(head[0])<<8|uint16(head[1]))%31 == 0 {
				zr, err := zlib.NewReader(br)
				if err != nil {
					return nil, fmt.Errorf("deflate: %w", err)
				}
				r = zr
			} else {
				r = flate.NewReader(br)
			}
		default:
			return nil, fmt.Errorf("unsupported content encoding %q", encodings[i])
		}
	}
	return r, nil
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }
