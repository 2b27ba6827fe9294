package fakes3

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Credentials is the one access key pair a Server accepts.
type Credentials struct {
	AccessKeyID     string
	SecretAccessKey string
}

// DefaultMaxClockSkew is how far a request's signing time may be from the
// server's clock, either way, when ServerOptions.MaxClockSkew is zero: AWS
// S3's own bound (RequestTimeTooSkewed). It limits how long a captured
// request can be replayed.
const DefaultMaxClockSkew = 15 * time.Minute

// The SigV4 constants S3 uses.
const (
	sigAlgorithm      = "AWS4-HMAC-SHA256"
	sigTerminator     = "aws4_request"
	sigService        = "s3"
	amzDateFormat     = "20060102T150405Z"
	unsignedPayload   = "UNSIGNED-PAYLOAD"
	streamingPrefix   = "STREAMING-"
	hdrContentSHA256  = "X-Amz-Content-Sha256"
	hdrAmzDate        = "X-Amz-Date"
	maxPresignExpires = 7 * 24 * time.Hour
)

// authError is a refused request: the S3 error to answer with.
type authError struct {
	status int
	code   string
	msg    string
}

func (e *authError) Error() string { return e.code + ": " + e.msg }

func denied(code, format string, args ...any) *authError {
	return &authError{status: http.StatusForbidden, code: code, msg: fmt.Sprintf(format, args...)}
}

// sigRequest is what a request says about its own signature, from the
// Authorization header or from a presigned URL's query.
type sigRequest struct {
	accessKey     string
	date          string // yyyymmdd of the credential scope
	region        string
	service       string
	terminator    string
	signedHeaders []string
	signature     string
	amzDate       time.Time
	presigned     bool
	expires       time.Duration // presigned only
}

// verifySigV4 checks r's AWS Signature Version 4 against creds, the way S3
// does for header authentication (Authorization: AWS4-HMAC-SHA256 ...) and
// for presigned URLs (X-Amz-Signature in the query). For a signed payload
// hash it then reads the body, checks it against x-amz-content-sha256, and
// puts it back in r.Body: only once the signature has proved the sender
// holds the key. UNSIGNED-PAYLOAD and the STREAMING-* hashes are
// accepted as S3 accepts them; chunk signatures of a streaming body are not
// checked (the header signature still proves the sender holds the key).
func verifySigV4(r *http.Request, creds Credentials, maxSkew time.Duration, now time.Time) *authError {
	bodySum, aerr := verifySig(r, creds, maxSkew, now)
	if aerr != nil {
		return aerr
	}
	return checkBodySum(r, bodySum)
}

// verifySig is verifySigV4 without the body: it checks the signature, which
// covers the body's hash as x-amz-content-sha256 states it, and returns
// that hash (nil for an unsigned payload). It reads nothing of the body, so
// that a request signed without the key is refused before any of it is.
func verifySig(r *http.Request, creds Credentials, maxSkew time.Duration, now time.Time) ([]byte, *authError) {
	sr, aerr := parseSig(r)
	if aerr != nil {
		return nil, aerr
	}
	if sr.accessKey != creds.AccessKeyID {
		return nil, denied("InvalidAccessKeyId", "the access key id %q is not this store's (its credentials were printed at its first start)", sr.accessKey)
	}
	if sr.service != sigService || sr.terminator != sigTerminator {
		return nil, &authError{status: http.StatusBadRequest, code: "AuthorizationHeaderMalformed",
			msg: fmt.Sprintf("credential scope must end in /%s/%s, not /%s/%s", sigService, sigTerminator, sr.service, sr.terminator)}
	}
	if sr.amzDate.Format("20060102") != sr.date {
		return nil, &authError{status: http.StatusBadRequest, code: "AuthorizationHeaderMalformed",
			msg: fmt.Sprintf("credential scope date %s is not the request date %s", sr.date, sr.amzDate.Format(amzDateFormat))}
	}
	if skew := now.Sub(sr.amzDate); skew > maxSkew && !sr.presigned || skew < -maxSkew {
		return nil, denied("RequestTimeTooSkewed", "the request time %s is %v away from the server's %s (limit ±%v)",
			sr.amzDate.Format(amzDateFormat), skew.Round(time.Second), now.UTC().Format(amzDateFormat), maxSkew)
	}
	if sr.presigned && now.After(sr.amzDate.Add(sr.expires)) {
		return nil, denied("AccessDenied", "request has expired (signed %s, expires after %v)", sr.amzDate.Format(amzDateFormat), sr.expires)
	}
	if !hasSigned(sr.signedHeaders, "host") {
		return nil, denied("AccessDenied", "SignedHeaders must include host")
	}
	// Every x-amz-* header and every conditional header must be signed, or
	// whoever relays a signed request could add or strip them.
	for name := range r.Header {
		l := strings.ToLower(name)
		if (strings.HasPrefix(l, "x-amz-") || strings.HasPrefix(l, "if-")) && !hasSigned(sr.signedHeaders, l) {
			return nil, denied("AccessDenied", "header %s is present but not signed", l)
		}
	}

	payload := unsignedPayload
	if !sr.presigned || r.Header.Get(hdrContentSHA256) != "" {
		payload = r.Header.Get(hdrContentSHA256)
		if payload == "" {
			return nil, &authError{status: http.StatusBadRequest, code: "InvalidRequest",
				msg: "missing required header for this request: x-amz-content-sha256"}
		}
	}
	var bodySum []byte // the body's signed SHA-256, nil when unsigned
	if payload != unsignedPayload && !strings.HasPrefix(payload, streamingPrefix) {
		h, err := hex.DecodeString(payload)
		if err != nil || len(h) != sha256.Size {
			return nil, &authError{status: http.StatusBadRequest, code: "InvalidArgument",
				msg: "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-..., or the hex SHA-256 of the body"}
		}
		bodySum = h
	}

	canonical := canonicalRequest(r, sr, payload)
	scope := sr.date + "/" + sr.region + "/" + sr.service + "/" + sr.terminator
	sum := sha256.Sum256([]byte(canonical))
	toSign := sigAlgorithm + "\n" + sr.amzDate.Format(amzDateFormat) + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	key := hmacSHA256([]byte("AWS4"+creds.SecretAccessKey), sr.date)
	key = hmacSHA256(key, sr.region)
	key = hmacSHA256(key, sr.service)
	key = hmacSHA256(key, sr.terminator)
	want := hmacSHA256(key, toSign)
	got, err := hex.DecodeString(sr.signature)
	if err != nil || !hmac.Equal(got, want) {
		return nil, denied("SignatureDoesNotMatch", "the request signature we calculated does not match the signature you provided; check the secret access key and the signing method")
	}
	return bodySum, nil
}

// checkBodySum reads r's body, puts it back in r.Body, and checks it
// against bodySum, the SHA-256 the request was signed with (nil: none).
func checkBodySum(r *http.Request, bodySum []byte) *authError {
	if bodySum == nil {
		return nil
	}
	var body []byte
	if r.Body != nil && r.Body != http.NoBody {
		b, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return bodyError(err)
		}
		body = b
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	if got := sha256.Sum256(body); !hmac.Equal(got[:], bodySum) {
		return &authError{status: http.StatusBadRequest, code: "XAmzContentSHA256Mismatch",
			msg: "the body's SHA-256 is not the x-amz-content-sha256 the request was signed with"}
	}
	return nil
}

// bodyError is the refusal of a body that could not be read whole: too
// large (MaxBody), or cut off.
func bodyError(err error) *authError {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return &authError{status: http.StatusBadRequest, code: "EntityTooLarge",
			msg: fmt.Sprintf("the request body exceeds this store's limit of %d bytes", tooBig.Limit)}
	}
	return &authError{status: http.StatusBadRequest, code: "IncompleteBody", msg: "read request body: " + err.Error()}
}

// parseSig reads the signature fields from the Authorization header, or
// from the query of a presigned URL. A request with neither is anonymous,
// which this store refuses.
func parseSig(r *http.Request) (sigRequest, *authError) {
	var sr sigRequest
	malformed := func(format string, args ...any) *authError {
		return &authError{status: http.StatusBadRequest, code: "AuthorizationHeaderMalformed", msg: fmt.Sprintf(format, args...)}
	}
	var credential, signed string
	q := r.URL.Query()
	switch auth := r.Header.Get("Authorization"); {
	case auth != "":
		rest, ok := strings.CutPrefix(auth, sigAlgorithm+" ")
		if !ok {
			return sr, denied("AccessDenied", "only %s (Signature Version 4) is accepted", sigAlgorithm)
		}
		for _, part := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
			switch k {
			case "Credential":
				credential = v
			case "SignedHeaders":
				signed = v
			case "Signature":
				sr.signature = v
			}
		}
		raw := r.Header.Get(hdrAmzDate)
		if raw == "" {
			if d := r.Header.Get("Date"); d != "" {
				t, err := http.ParseTime(d)
				if err != nil {
					return sr, denied("AccessDenied", "Date header %q: %v", d, err)
				}
				sr.amzDate = t.UTC()
			} else {
				return sr, denied("AccessDenied", "the request is signed but carries no X-Amz-Date or Date header")
			}
		} else {
			t, err := time.Parse(amzDateFormat, raw)
			if err != nil {
				return sr, denied("AccessDenied", "X-Amz-Date %q: want %s", raw, amzDateFormat)
			}
			sr.amzDate = t
		}
	case q.Has("X-Amz-Algorithm"):
		if alg := q.Get("X-Amz-Algorithm"); alg != sigAlgorithm {
			return sr, denied("AccessDenied", "X-Amz-Algorithm %q: only %s is accepted", alg, sigAlgorithm)
		}
		sr.presigned = true
		credential, signed, sr.signature = q.Get("X-Amz-Credential"), q.Get("X-Amz-SignedHeaders"), q.Get("X-Amz-Signature")
		t, err := time.Parse(amzDateFormat, q.Get("X-Amz-Date"))
		if err != nil {
			return sr, denied("AccessDenied", "X-Amz-Date %q: want %s", q.Get("X-Amz-Date"), amzDateFormat)
		}
		sr.amzDate = t
		secs, err := strconv.ParseInt(q.Get("X-Amz-Expires"), 10, 64)
		if err != nil || secs < 1 || time.Duration(secs)*time.Second > maxPresignExpires {
			return sr, denied("AuthorizationQueryParametersError", "X-Amz-Expires %q: want 1 to %d seconds", q.Get("X-Amz-Expires"), int(maxPresignExpires.Seconds()))
		}
		sr.expires = time.Duration(secs) * time.Second
	default:
		return sr, denied("AccessDenied", "anonymous request refused: this store checks AWS Signature V4; "+
			"use the access key printed when it started (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)")
	}
	parts := strings.Split(credential, "/")
	if len(parts) != 5 || parts[0] == "" {
		return sr, malformed("Credential %q: want ACCESSKEY/DATE/REGION/SERVICE/aws4_request", credential)
	}
	sr.accessKey, sr.date, sr.region, sr.service, sr.terminator = parts[0], parts[1], parts[2], parts[3], parts[4]
	if signed == "" || sr.signature == "" {
		return sr, malformed("SignedHeaders and Signature are required")
	}
	sr.signedHeaders = strings.Split(signed, ";")
	if !sort.StringsAreSorted(sr.signedHeaders) {
		return sr, malformed("SignedHeaders %q are not sorted", signed)
	}
	return sr, nil
}

// canonicalRequest is SigV4's canonical request for r as S3 defines it: the
// path as sent (S3 signs it escaped once, not twice), the query re-encoded
// and sorted (without X-Amz-Signature for a presigned URL), and the signed
// headers' values trimmed with inner runs of spaces collapsed.
func canonicalRequest(r *http.Request, sr sigRequest, payload string) string {
	path := r.URL.EscapedPath()
	if path == "" {
		path = "/"
	}
	type param struct{ k, v string }
	var params []param
	for k, vs := range r.URL.Query() {
		if sr.presigned && k == "X-Amz-Signature" {
			continue
		}
		for _, v := range vs {
			params = append(params, param{sigEscape(k), sigEscape(v)})
		}
	}
	sort.Slice(params, func(i, j int) bool {
		if params[i].k != params[j].k {
			return params[i].k < params[j].k
		}
		return params[i].v < params[j].v
	})
	var query strings.Builder
	for i, p := range params {
		if i > 0 {
			query.WriteByte('&')
		}
		query.WriteString(p.k + "=" + p.v)
	}

	var headers strings.Builder
	for _, name := range sr.signedHeaders {
		var values []string
		switch name {
		case "host":
			values = []string{r.Host}
		case "content-length":
			values = r.Header.Values("Content-Length")
			if len(values) == 0 && r.ContentLength >= 0 {
				values = []string{strconv.FormatInt(r.ContentLength, 10)}
			}
		default:
			values = r.Header.Values(name)
		}
		clean := make([]string, len(values))
		for i, v := range values {
			clean[i] = collapseSpaces(v)
		}
		headers.WriteString(name + ":" + strings.Join(clean, ",") + "\n")
	}
	return strings.Join([]string{r.Method, path, query.String(), headers.String(), strings.Join(sr.signedHeaders, ";"), payload}, "\n")
}

// sigEscape is SigV4's URI encoding: every byte outside A-Z a-z 0-9 - _ . ~
// as %XX in upper-case hex.
func sigEscape(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

// collapseSpaces trims spaces at both ends and turns inner runs of spaces
// into one, as the canonical header value needs.
func collapseSpaces(v string) string {
	var b strings.Builder
	space := false
	for _, c := range strings.Trim(v, " ") {
		if c == ' ' {
			space = true
			continue
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(c)
	}
	return b.String()
}

func hasSigned(signed []string, name string) bool {
	i := sort.SearchStrings(signed, name)
	return i < len(signed) && signed[i] == name
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}
