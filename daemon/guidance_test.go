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

// noRedirects sends a request as it is and never follows a redirect.
func noRedirects(t *testing.T, method, url, body string, hdr ...string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var v map[string]any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("%s %s: %d, body not JSON: %q", method, url, resp.StatusCode, raw)
	}
	return resp.StatusCode, resp.Header, v
}

// A path with an empty, "." or ".." segment gets a deed error, not the
// ServeMux's bare 307 to the cleaned path (which for /v1/cells/../x/append
// is another cell's append), and nothing is written.
func TestNonCanonicalPathsAreRefused(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	for _, tc := range []struct {
		method, path string
		status       int
		code         errcode.Code
	}{
		{"POST", "/v1/cells//append", 400, errcode.CodeInvalidName},
		{"POST", "/v1/cells/./append", 400, errcode.CodeInvalidName},
		{"POST", "/v1/cells/../x/append", 400, errcode.CodeInvalidName},
		{"GET", "/v1/cells/x/../y/records", 400, errcode.CodeInvalidName},
		{"GET", "//v1/cells", 404, errcode.CodeBadRequest},
		{"GET", "/v1/./status", 404, errcode.CodeBadRequest},
	} {
		status, _, body := noRedirects(t, tc.method, a.srv.URL+tc.path, "x")
		if status != tc.status || body["code"] != string(tc.code) || !strings.HasPrefix(body["error"].(string), string(tc.code)) {
			t.Errorf("%s %s: %d %v, want %d %s", tc.method, tc.path, status, body, tc.status, tc.code)
		}
	}
	for _, cell := range []string{"x", "y"} {
		if _, ok := m.Bytes("cells/" + cell + "/own.json"); ok {
			t.Errorf("a refused request claimed %s", cell)
		}
	}
	// The canonical paths are untouched.
	if status, _, body := noRedirects(t, "POST", a.srv.URL+"/v1/cells/x/append", "x"); status != 200 {
		t.Errorf("append: %d %v", status, body)
	}
}

// A 401 names the ways to send the token, with a WWW-Authenticate header.
func TestUnauthorizedSaysHowToAuthenticate(t *testing.T) {
	a := startTestDaemon(t, fakes3.NewMem().Client("a"), "a", APIConfig{Token: "s3cret"})
	status, hdr, body := noRedirects(t, "POST", a.srv.URL+"/v1/cells/x/append", "x")
	msg, _ := body["error"].(string)
	if status != 401 || body["code"] != string(errcode.CodeUnauthorized) || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
		t.Fatalf("%d %v %v, want 401 DEED-E041 with WWW-Authenticate: Bearer", status, hdr, body)
	}
	for _, want := range []string{"Authorization: Bearer", "--token-file", "DEED_TOKEN"} {
		if !strings.Contains(msg, want) {
			t.Errorf("401 message %q does not name %q", msg, want)
		}
	}
}

// A barrier read of a cell nobody holds says to append or claim first; of
// one another node holds (no fleet to forward to), names that node.
func TestBarrierReadRefusalSaysWhatToDo(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	b := startTestDaemon(t, m.Client("b"), "b", APIConfig{})
	status, _, body := noRedirects(t, "GET", a.srv.URL+"/v1/cells/free/records?barrier=true", "")
	if msg, _ := body["error"].(string); status != 409 && status != 400 || !strings.Contains(msg, "nobody holds it: append or claim first") {
		t.Errorf("barrier read of a free cell: %d %v", status, body)
	}
	if status, _, body := noRedirects(t, "POST", b.srv.URL+"/v1/cells/held/append", "x"); status != 200 {
		t.Fatalf("append on b: %d %v", status, body)
	}
	status, _, body = noRedirects(t, "GET", a.srv.URL+"/v1/cells/held/records?barrier=true", "")
	if msg, _ := body["error"].(string); body["code"] != string(errcode.CodeNotHolder) || !strings.Contains(msg, "node b holds it") {
		t.Errorf("barrier read of b's cell on a: %d %v", status, body)
	}
}

// A move of a cell that was never claimed says so and creates nothing.
func TestMoveOfMissingCellSaysSo(t *testing.T) {
	m := fakes3.NewMem()
	a := startTestDaemon(t, m.Client("a"), "a", APIConfig{})
	status, _, body := noRedirects(t, "POST", a.srv.URL+"/v1/cells/nosuch/move?to=a", "")
	if msg, _ := body["error"].(string); status != 400 || body["code"] != string(errcode.CodeBadRequest) || !strings.Contains(msg, "no such cell") {
		t.Errorf("move of a missing cell: %d %v", status, body)
	}
	if _, ok := m.Bytes("cells/nosuch/own.json"); ok {
		t.Error("the refused move claimed the cell")
	}
}
