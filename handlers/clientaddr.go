package handlers

import (
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/go-chi/httprate"
)

// clientAddrKey holds the request's client address in its context.
type clientAddrKey struct{}

// clientAddr is the client's address as the limits count it, IPv6 by its
// /64.
func clientAddr(r *http.Request) string { return httprate.CanonicalizeIP(clientIPOf(r)) }

// clientIPOf is the client's address that requestScope found.
func clientIPOf(r *http.Request) string {
	if addr, _ := r.Context().Value(clientAddrKey{}).(string); addr != "" {
		return addr
	}
	return peerIP(r).String()
}

// clientIP walks the forwarding chain back from the peer while each hop is a
// trusted proxy: the first address not trusted is the client's. Without
// trusted proxies, or from a peer that is not one, the headers are ignored,
// since anyone can send them.
func (ac access) clientIP(r *http.Request) string {
	peer := peerIP(r)
	if !ac.trusted(peer) {
		return peer.String()
	}
	hops := forwardedFor(r.Header)
	for i := len(hops) - 1; i >= 0; i-- {
		ip, err := netip.ParseAddr(hops[i])
		if err != nil {
			// A hop a trusted proxy passed on that is no address: the
			// nearest trustworthy one is the proxy that added it.
			return peer.String()
		}
		ip = ip.Unmap()
		if !ac.trusted(ip) {
			return ip.String()
		}
		peer = ip
	}
	return peer.String()
}

func (ac access) trusted(ip netip.Addr) bool {
	for _, p := range ac.TrustedProxies {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

func peerIP(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.IPv4Unspecified()
	}
	return ip.Unmap()
}

// forwardedFor lists the addresses of the forwarding chain, nearest to the
// client first: Forwarded's for= parameters (RFC 7239) when that header is
// sent, else X-Forwarded-For.
func forwardedFor(h http.Header) []string {
	var hops []string
	if fwd := h.Values("Forwarded"); len(fwd) > 0 {
		for _, line := range fwd {
			for elem := range strings.SplitSeq(line, ",") {
				for pair := range strings.SplitSeq(elem, ";") {
					k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
					if !ok || !strings.EqualFold(k, "for") {
						continue
					}
					hops = append(hops, forwardedNode(strings.Trim(v, `"`)))
				}
			}
		}
		return hops
	}
	for _, line := range h.Values("X-Forwarded-For") {
		for hop := range strings.SplitSeq(line, ",") {
			hops = append(hops, strings.TrimSpace(hop))
		}
	}
	return hops
}

// forwardedNode is the address of a Forwarded node: "192.0.2.1",
// "192.0.2.1:4711", "[2001:db8::1]" or "[2001:db8::1]:4711". Obfuscated and
// unknown nodes stay as they are, and do not parse as addresses.
func forwardedNode(v string) string {
	if strings.HasPrefix(v, "[") {
		if end := strings.IndexByte(v, ']'); end > 0 {
			return v[1:end]
		}
		return v
	}
	if host, _, err := net.SplitHostPort(v); err == nil {
		return host
	}
	return v
}
