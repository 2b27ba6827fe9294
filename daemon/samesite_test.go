package daemon

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/fakes3"
)

// browse sends one request as a browser would: host overrides the Host
// header, hdr are more headers.
func browse(t *testing.T, method, url, host, body string, hdr ...string) (int, map[string]any, bool) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	return resp.StatusCode, m, resp.Close
}

// A web page the user opens cannot drive a daemon without a token: a
// "simple" cross-site POST (text/plain, no preflight) to append, release
// or drain, and a DNS-rebound page reading records or the status, are
// refused with 403 DEED-E042, the connection closed, nothing done. The
// CLI's requests (no Origin, a loopback Host) and the status page's own
// (same-origin) pass.
func TestTokenlessDaemonRefusesCrossSite(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	u := a.srv.URL
	port := u[strings.LastIndex(u, ":")+1:]
	if st, _ := a.call(t, "POST", "/v1/cells/demo/claim", ""); st != 200 {
		t.Fatalf("claim: %d", st)
	}
	evil := []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Content-Type", "text/plain"}
	for _, c := range []struct {
		name, method, path, host string
		hdr                      []string
	}{
		{"cross-site append", "POST", "/v1/cells/demo/append", "", evil},
		{"cross-site drain", "POST", "/v1/node/drain", "", evil},
		{"cross-site release", "POST", "/v1/cells/demo/release", "", evil},
		{"evil origin only", "POST", "/v1/cells/demo/append", "", []string{"Origin", "https://evil.example"}},
		{"null origin", "POST", "/v1/cells/demo/append", "", []string{"Origin", "null"}},
		{"another local site", "POST", "/v1/cells/demo/append", "", []string{"Origin", "http://localhost:3000", "Sec-Fetch-Site", "same-site"}},
		{"another local site's fetch", "GET", "/v1/cells/demo/records", "", []string{"Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "cors"}},
		{"another local site's navigating POST", "POST", "/v1/cells/demo/append", "", []string{"Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "navigate"}},
		{"cross-site navigation", "GET", "/v1/cells/demo/records", "", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "navigate"}},
		{"rebound records", "GET", "/v1/cells/demo/records", "rebind.evil.example:" + port, nil},
		{"rebound status", "GET", "/v1/status", "rebind.evil.example:" + port, nil},
		{"rebound status page", "GET", "/", "rebind.evil.example", nil},
	} {
		st, body, closed := browse(t, c.method, u+c.path, c.host, "x", c.hdr...)
		if st != http.StatusForbidden || body["code"] != string(errcode.CodeCrossSite) || !closed {
			t.Errorf("%s: %d %v (closed %v), want 403 %s and the connection closed", c.name, st, body, closed, errcode.CodeCrossSite)
		}
	}
	if _, body := a.call(t, "GET", "/v1/cells/demo/records", ""); len(body["records"].([]any)) != 0 {
		t.Errorf("a refused append was written: %v", body)
	}
	if _, body := a.call(t, "GET", "/v1/cells", ""); len(body["cells"].([]any)) != 1 {
		t.Errorf("a refused release or drain took effect: %v", body)
	}
	for _, c := range []struct {
		name, host string
		hdr        []string
	}{
		{"cli", "", nil},
		{"localhost", "localhost:" + port, nil},
		{"a .localhost name", "deed.localhost:" + port, nil},
		{"ipv6 loopback", "[::1]:" + port, nil},
		{"the advertised host", "a", nil},
		{"status page", "", []string{"Origin", u, "Sec-Fetch-Site", "same-origin"}},
		{"typed in the address bar", "", []string{"Sec-Fetch-Site", "none"}},
		{"a link from another node's page on this host", "", []string{"Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "navigate"}},
	} {
		if st, body, _ := browse(t, "GET", u+"/v1/cells/demo/records", c.host, "", c.hdr...); st != 200 {
			t.Errorf("%s: %d %v, want 200", c.name, st, body)
		}
	}
	if st, _, _ := browse(t, "GET", u+"/healthz", "rebind.evil.example", ""); st != 200 {
		t.Errorf("/healthz: %d, want 200 whatever the Host (as with a token)", st)
	}
}

// A daemon with a token is not weakened: a cross-site request still needs
// the token (a page cannot know it), and with it is served.
func TestTokenDaemonCrossSiteNeedsToken(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{Token: "s3cret"})
	evil := []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Content-Type", "text/plain"}
	if st, body, _ := browse(t, "POST", a.srv.URL+"/v1/cells/demo/append", "rebind.evil.example", "x", evil...); st != 401 || body["code"] != string(errcode.CodeUnauthorized) {
		t.Errorf("without the token: %d %v, want 401 %s", st, body, errcode.CodeUnauthorized)
	}
	if st, body, _ := browse(t, "POST", a.srv.URL+"/v1/cells/demo/append", "deed.example.com", "x", append(evil, "Authorization", "Bearer s3cret")...); st != 200 {
		t.Errorf("with the token: %d %v, want 200", st, body)
	}
}
