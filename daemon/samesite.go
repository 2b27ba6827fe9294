package daemon

import (
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/deedkit/deed/errcode"
)

// sameSite is what protects a daemon without a token from the web pages
// its user's browser opens. Such a daemon listens on loopback only, and
// trusts whatever process can reach it; a browser can reach it too, for
// any page: a "simple" cross-site POST (text/plain, no preflight) would
// append, release or drain, and a page whose name is rebound to 127.0.0.1
// (DNS rebinding) could read every answer. So it refuses, with DEED-E042:
//
//   - a request a browser marks as sent from another site (Sec-Fetch-Site
//     cross-site or same-site: another port of localhost is another
//     program, not this daemon), except a same-site top-level navigation
//     (a link followed from another node's status page on this host: GET
//     or HEAD, Sec-Fetch-Mode navigate), which changes nothing and whose
//     answer only the user sees, never the page that linked;
//   - an Origin that is neither a loopback host nor one of hosts (the
//     status page's own requests are same-origin);
//   - a Host that is neither a loopback name or address nor one of hosts:
//     a rebound page names its own domain in Host, which it cannot forge.
//
// Clients that are not browsers (the CLI, curl, peers) send none of the
// first two headers and a loopback or advertised Host, and pass.
func sameSite(r *http.Request, hosts []string) error {
	switch s := r.Header.Get("Sec-Fetch-Site"); s {
	case "same-site":
		if sameSiteNavigation(r) {
			break
		}
		fallthrough
	case "cross-site":
		return errcode.Errorf(errcode.CodeCrossSite, "refused: a browser request from another site (Sec-Fetch-Site: %s) to a daemon without a token; serve browsers with --token", s)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !localHost(u.Hostname(), hosts) {
			return errcode.Errorf(errcode.CodeCrossSite, "refused: a browser request from origin %q to a daemon without a token; serve browsers with --token", o)
		}
	}
	if r.Host != "" && !localHost(hostOnly(r.Host), hosts) {
		return errcode.Errorf(errcode.CodeCrossSite, "refused: Host %q is not a loopback name or this node's address (DNS rebinding?); a daemon without a token answers only those; use http://127.0.0.1:PORT, or set --token", r.Host)
	}
	return nil
}

// sameSiteNavigation says whether r is a top-level navigation: the user
// followed a link or typed an address, and the browser shows the answer
// to the user, not to the page it came from. Only GET and HEAD, which
// change nothing.
func sameSiteNavigation(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodHead) &&
		r.Header.Get("Sec-Fetch-Mode") == "navigate"
}

// localHost says whether h (no port) is a loopback name or address, or one
// of hosts. Names under .localhost are loopback by definition (RFC 6761):
// browsers resolve them themselves, never through DNS.
func localHost(h string, hosts []string) bool {
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	if ip := net.ParseIP(strings.Trim(h, "[]")); ip != nil && ip.IsLoopback() {
		return true
	}
	return slices.ContainsFunc(hosts, func(x string) bool { return strings.EqualFold(hostOnly(x), h) })
}

// hostOnly is the host of a Host header value (host, host:port, [v6]:port).
func hostOnly(hp string) string {
	if h, _, err := net.SplitHostPort(hp); err == nil {
		return h
	}
	return strings.Trim(hp, "[]")
}

// advertiseHost is the host of an --advertise address (a URL, or
// host:port without a scheme); "" when it has none.
func advertiseHost(adv string) string {
	if adv == "" {
		return ""
	}
	if !strings.Contains(adv, "://") {
		adv = "http://" + adv
	}
	u, err := url.Parse(adv)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
