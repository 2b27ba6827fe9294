package daemon

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
	"github.com/deedkit/deed/owner"
	"github.com/deedkit/deed/replication"
)

// The API's limits when APIConfig leaves them zero: `deed run`'s defaults.
const (
	DefaultMaxBody  = 1 << 20
	DefaultMaxLimit = 1000
	// DefaultMaxWaitingReads bounds the reads (?wait=) a node keeps
	// waiting at once: each holds its connection and one goroutine.
	DefaultMaxWaitingReads = 4096
)

// APIConfig bounds and guards the HTTP API.
type APIConfig struct {
	// Token, when set, is required as "Authorization: Bearer <token>" on
	// every endpoint but /healthz and /readyz.
	Token string
	// MaxBody bounds a request body (an appended record); larger → DEED-E040.
	MaxBody int64
	// MaxLimit bounds ?limit on reads.
	MaxLimit int
	// MaxWaitingReads bounds the reads with ?wait= waiting at once on this
	// node; one more is refused with DEED-E014.
	MaxWaitingReads int
	// MaxFollowers bounds the event streams (?follow=true) this node
	// serves at once; one more is refused with DEED-E014.
	MaxFollowers int
	// Node names this node in the Deed-Node header of every answer;
	// Daemon.Handler sets it from Config.Node.
	Node string
	// Hosts are the host names (or addresses) a token-less API answers
	// besides loopback ones; Daemon.Handler adds Config.Advertise's host.
	// A request naming another Host, or sent by a browser from another
	// site, is refused with DEED-E042 (see sameSite).
	Hosts []string

	// peers checks the proofs of peers' requests (Config.FleetSecret).
	peers *peerVerifier
}

// WithFleetSecret is c able to check peer proofs made with the fleet
// secret, for StartingHandler: a node that is starting answers its peers'
// forwarded requests with a proved refusal (applied "no", retry) rather
// than a 401 its peers cannot tell from a stranger's. Give the daemon the
// same APIConfig (Config.API) and it keeps the same replay cache, so that
// a peer request the starting node refused cannot be replayed to it once
// it is up. Set Node first.
func (c APIConfig) WithFleetSecret(secret string) APIConfig {
	if secret != "" {
		c.peers = newPeerVerifier(secret, c.Node)
	}
	return c
}

// Handler is the daemon's HTTP API, bounded and guarded by Config.API:
// /healthz, /readyz, /metrics, /v1/cells/..., and the status page (/ and
// /v1/status).
func (d *Daemon) Handler() http.Handler { return d.handler(d.cfg.API) }

// handler builds the daemon's HTTP API with cfg.
func (d *Daemon) handler(cfg APIConfig) http.Handler {
	if cfg.Node == "" {
		cfg.Node = d.cfg.Node
	}
	cfg.peers = d.peers
	if cfg.MaxWaitingReads <= 0 {
		cfg.MaxWaitingReads = DefaultMaxWaitingReads
	}
	if cfg.MaxFollowers <= 0 {
		cfg.MaxFollowers = DefaultMaxFollowers
	}
	if h := advertiseHost(d.cfg.Advertise); h != "" {
		cfg.Hosts = append(slices.Clip(cfg.Hosts), h)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSONStatus(w, http.StatusOK, map[string]any{"ok": true})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !d.ready() {
			writeError(w, errcode.Errorf(errcode.CodeNodeFenced, "not ready: node lease not held"))
			return
		}
		writeJSONStatus(w, http.StatusOK, map[string]any{"ready": true, "node": d.cfg.Node})
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(d.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /v1/cells", d.listHeld)
	mux.HandleFunc("GET /v1/cells/{cell}", d.showCell)
	mux.HandleFunc("POST /v1/cells/{cell}/claim", d.claimCell)
	mux.HandleFunc("POST /v1/cells/{cell}/release", d.releaseCell)
	mux.HandleFunc("POST /v1/cells/{cell}/append", func(w http.ResponseWriter, r *http.Request) { d.appendCell(w, r, cfg.MaxBody) })
	mux.HandleFunc("POST /v1/cells/{cell}/batch", func(w http.ResponseWriter, r *http.Request) { d.appendBatch(w, r, cfg.MaxBody) })
	mux.HandleFunc("GET /v1/cells/{cell}/records", func(w http.ResponseWriter, r *http.Request) { d.readCell(w, r, cfg) })
	mux.HandleFunc("GET /v1/cells/{cell}/tail", d.tailCell)
	mux.HandleFunc("PUT /v1/cells/{cell}/snapshot", d.putSnapshot)
	mux.HandleFunc("GET /v1/cells/{cell}/snapshot", d.getSnapshot)
	mux.HandleFunc("POST /v1/cells/{cell}/trim", d.trimCell)
	mux.HandleFunc("POST /v1/cells/{cell}/handoff", d.takeHandoff)
	mux.HandleFunc("POST /v1/cells/{cell}/hint", d.takeReleaseHint)
	mux.HandleFunc("POST /v1/cells/{cell}/move", d.moveCell)
	mux.HandleFunc("POST /v1/node/drain", d.drainNode(true))
	mux.HandleFunc("DELETE /v1/node/drain", d.drainNode(false))
	mux.HandleFunc("GET /{$}", d.serveStatusPage)
	mux.HandleFunc("GET /v1/status", d.serveStatusJSON)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if allow := allowedMethods(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeErrorStatus(w, http.StatusMethodNotAllowed, errcode.Errorf(errcode.CodeBadRequest, "method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
			return
		}
		writeErrorStatus(w, http.StatusNotFound, errcode.Errorf(errcode.CodeBadRequest, "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
	return guard(cfg, canonicalPaths(mux))
}

// canonicalPaths answers a request whose path has an empty, "." or ".."
// segment with a deed error, before the ServeMux would: it answers such a
// path with a bare 307 redirect to the cleaned one, which a client
// following it would send to another cell (/v1/cells/../x/append is x's
// append) or to nowhere. Under /v1/cells/ the segment is where a cell name
// goes, and none of them is one (DEED-E001); elsewhere there is no such
// endpoint.
func canonicalPaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if canonical(p) {
			next.ServeHTTP(w, r)
			return
		}
		if strings.HasPrefix(p, "/v1/cells/") {
			writeErrorStatus(w, http.StatusBadRequest, errcode.Errorf(errcode.CodeInvalidName,
				"invalid cell name in %s: a cell name is not empty, %q or %q (the path has an empty, . or .. segment)", p, ".", ".."))
			return
		}
		writeErrorStatus(w, http.StatusNotFound, errcode.Errorf(errcode.CodeBadRequest, "no such endpoint: %s %s (the path has an empty, . or .. segment)", r.Method, p))
	})
}

// canonical reports whether p is an absolute path without empty, "." or
// ".." segments (a trailing slash is an empty last segment, which the
// ServeMux matches or 404s on its own).
func canonical(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if (s == "" && i != len(segs)-1) || s == "." || s == ".." {
			return false
		}
	}
	return true
}

// allowedMethods lists the methods mux serves on r's path, when r's own
// method is not one of them.
func allowedMethods(mux *http.ServeMux, r *http.Request) []string {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		if m == r.Method {
			continue
		}
		r2 := r.Clone(r.Context())
		r2.Method = m
		if _, pattern := mux.Handler(r2); pattern != "/" && pattern != "" {
			allow = append(allow, m)
		}
	}
	return allow
}

// bearerToken is the token of an Authorization header of the Bearer
// scheme, which is matched without regard to case (RFC 9110); surrounding
// whitespace is not part of the token.
func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// guard names the node on every answer (Deed-Node), enforces the bearer
// token (or, on a peer's request to a peer endpoint, its peer proof) and
// the body limit before any handler, and reads the body whole, within
// apiBodyTimeout, so that a slow body is cut off before any handler runs
// and nothing is written for it. A peer's proof is checked once the body
// it covers is in; its answer is signed (answerBuffer).
func guard(cfg APIConfig, next http.Handler) http.Handler {
	want := []byte(strings.TrimSpace(cfg.Token)) // a token file's trailing newline is not part of it
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w = &deadlineWriter{ResponseWriter: w}
		if cfg.Node != "" {
			w.Header().Set(HeaderNode, cfg.Node)
		}
		var proof peerProof
		refuse := func(err error) {
			w.Header().Set("Connection", "close")
			if cfg.peers == nil || cfg.peers.key == nil || proof.nonce == "" {
				writeError(w, err)
				return
			}
			// A peer's refused request is answered with a proof all the
			// same, so that its sender knows the refusal is this node's
			// (nothing ran) and may say "not applied".
			ab := &answerBuffer{ResponseWriter: w}
			writeError(ab, err)
			ab.finish(cfg.peers.key, proof.nonce)
		}
		if r.Header.Get(headerPeerToken) != "" {
			refuse(errcode.Errorf(errcode.CodeUnauthorized, "unauthorized: %s (the fleet secret in the clear) is no longer accepted: every node of the fleet must run a deed that sends %s", headerPeerToken, headerPeerProof))
			return
		}
		// A proof opens only the peer endpoints; elsewhere it is ignored
		// and the bearer token is needed as from any client.
		ph := r.Header.Get(headerPeerProof)
		peer := ph != "" && peerEndpoint(r)
		if peer {
			var err error
			if cfg.peers == nil {
				err = errcode.Errorf(errcode.CodeUnauthorized, "unauthorized: %s on a node without a fleet secret", headerPeerProof)
			} else {
				proof, err = cfg.peers.precheck(ph)
			}
			if err != nil {
				refuse(err)
				return
			}
		}
		open := r.URL.Path == "/healthz" || r.URL.Path == "/readyz"
		if !peer && len(want) == 0 && !open {
			if err := sameSite(r, cfg.Hosts); err != nil {
				w.Header().Set("Connection", "close")
				writeError(w, err)
				return
			}
		}
		if !peer && len(want) > 0 && !open {
			got, ok := bearerToken(r.Header.Get("Authorization"))
			if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="deed"`)
				// An unauthenticated client keeps no connection open.
				w.Header().Set("Connection", "close")
				writeError(w, errcode.Errorf(errcode.CodeUnauthorized, "unauthorized: missing or wrong bearer token: send Authorization: Bearer TOKEN, the token of the node's --token-file (the CLI: --token, --token-file or DEED_TOKEN)"))
				return
			}
		}
		if r.ContentLength > cfg.MaxBody {
			w.Header().Set("Connection", "close") // the body is not read
			writeError(w, errcode.Errorf(errcode.CodeBadRequest, "request body of %d bytes exceeds the limit of %d", r.ContentLength, cfg.MaxBody))
			return
		}
		var raw []byte // the body a peer proof covers
		if r.ContentLength != 0 {
			rc := http.NewResponseController(w)
			_ = rc.SetReadDeadline(time.Now().Add(apiBodyTimeout))
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, cfg.MaxBody))
			if err != nil {
				// The connection is closed after the answer, and the
				// deadline stays passed: the server would otherwise read
				// on what is left of the body (up to 256 KiB, at whatever
				// pace the client sends it) before closing.
				w.Header().Set("Connection", "close")
				_ = rc.SetReadDeadline(time.Unix(1, 0))
				var tooBig *http.MaxBytesError
				if errors.As(err, &tooBig) {
					writeError(w, errcode.Errorf(errcode.CodeBadRequest, "request body exceeds the limit of %d bytes", cfg.MaxBody))
				} else {
					writeError(w, errcode.Errorf(errcode.CodeBadRequest, "request body not received whole within %v: %w", apiBodyTimeout, err))
				}
				return
			}
			_ = rc.SetReadDeadline(time.Time{})
			r.Body = io.NopCloser(bytes.NewReader(body))
			if peer {
				raw = body
			}
		}
		if peer {
			if err := cfg.peers.verify(proof, r, raw); err != nil {
				refuse(err)
				return
			}
			hops, err := strconv.Atoi(r.Header.Get(headerHops))
			if err != nil || hops < 1 {
				hops = 1
			}
			r = r.WithContext(context.WithValue(r.Context(), peerKey{}, peerCall{from: proof.from, hops: hops}))
			ab := &answerBuffer{ResponseWriter: w}
			next.ServeHTTP(ab, r)
			ab.finish(cfg.peers.key, proof.nonce)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (d *Daemon) showCell(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("cell")
	rec, exists, err := owner.Inspect(r.Context(), d.b, name)
	if err != nil {
		writeError(w, err)
		return
	}
	v := client.CellInfo{Cell: name, Node: rec.Node, Epoch: rec.Epoch, Released: exists && rec.Released(), Claimed: exists}
	if c := d.held(name); c != nil && c.lease.Epoch() == rec.Epoch {
		v.HeldHere, v.OwnerAlive, v.OwnerAddr = true, true, d.cfg.Advertise
	} else if exists && !rec.Released() {
		if n, err := d.currentNode(); err == nil {
			if ob, err := n.Observer().Observe(r.Context(), rec.Node); err == nil {
				v.OwnerAlive = owner.Alive(ob, time.Now(), n.Params())
				v.OwnerAddr = ob.Addr
			}
		}
	}
	writeJSONStatus(w, http.StatusOK, v)
}

func (d *Daemon) listHeld(w http.ResponseWriter, r *http.Request) {
	out := []client.HeldCell{}
	for _, c := range d.cellEntries() {
		if h := c.live(); h != nil {
			out = append(out, client.HeldCell{Cell: c.name, Epoch: h.lease.Epoch()})
		}
	}
	slices.SortFunc(out, func(a, b client.HeldCell) int { return strings.Compare(a.Cell, b.Cell) })
	writeJSONStatus(w, http.StatusOK, client.HeldCells{Node: d.cfg.Node, Cells: out})
}

func (d *Daemon) claimCell(w http.ResponseWriter, r *http.Request) {
	force, err := boolParam(r, "force")
	if err != nil {
		writeError(w, err)
		return
	}
	c, err := d.acquire(r.Context(), r.PathValue("cell"), force)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSONStatus(w, http.StatusOK, client.Claim{Cell: c.name, Node: d.cfg.Node, Epoch: c.lease.Epoch()})
}

func (d *Daemon) releaseCell(w http.ResponseWriter, r *http.Request) {
	rec, err := d.release(r.Context(), r.PathValue("cell"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSONStatus(w, http.StatusOK, client.Released{Cell: r.PathValue("cell"), Node: "", Epoch: rec.Epoch, Released: true})
	// In the background, once the answer is written: the push never
	// delays nor fails the release.
	d.pushReleaseHint(r.PathValue("cell"))
}

// The headers of idempotent appends.
const (
	// HeaderIdempotencyKey names an append (or batch) so that a retry of it
	// is answered with the first one's result instead of being written
	// again (replication.AppendOptions.Key).
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderReplayed is "true" on the answer of a keyed append that was
	// answered from an earlier one: nothing was written this time.
	HeaderReplayed = "Idempotent-Replayed"
)

// appendOptions reads an append's Idempotency-Key header and ?match_pos.
func appendOptions(r *http.Request) (replication.AppendOptions, error) {
	var o replication.AppendOptions
	if vs := r.Header.Values(HeaderIdempotencyKey); len(vs) > 0 {
		if len(vs) > 1 {
			return o, errcode.Errorf(errcode.CodeBadRequest, "%d %s headers: want one", len(vs), HeaderIdempotencyKey)
		}
		if err := replication.ValidateKey(vs[0]); err != nil {
			return o, errcode.Wrap(err, "%s header", HeaderIdempotencyKey)
		}
		o.Key = vs[0]
	}
	if s := r.URL.Query().Get("match_pos"); s != "" || r.URL.Query().Has("match_pos") {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil || v == 0 {
			return o, errcode.Errorf(errcode.CodeBadRequest, "?match_pos=%q: want a position (1 or more: the log's next position)", s)
		}
		o.MatchPos = replication.Pos(v)
	}
	return o, nil
}

func (d *Daemon) appendCell(w http.ResponseWriter, r *http.Request, maxBody int64) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, errcode.Errorf(errcode.CodeBadRequest, "record exceeds the limit of %d bytes", maxBody))
			return
		}
		writeError(w, errcode.Errorf(errcode.CodeBadRequest, "read request body: %w", err))
		return
	}
	if len(body) == 0 {
		// A record of no bytes is almost always a client's mistake (an
		// empty pipe, a forgotten --data); it is refused, not written.
		writeError(w, errcode.Errorf(errcode.CodeBadRequest, "empty append: a record must have at least one byte"))
		return
	}
	d.appendRecords(w, r, body, [][]byte{body}, false)
}

// appendBatch is POST /v1/cells/{cell}/batch: {"records":[{"data":…}]},
// 1 to replication.MaxBatchRecords records appended atomically.
func (d *Daemon) appendBatch(w http.ResponseWriter, r *http.Request, maxBody int64) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, errcode.Errorf(errcode.CodeBadRequest, "batch exceeds the limit of %d bytes, or was not read: %w", maxBody, err))
		return
	}
	var in client.BatchRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		writeError(w, errcode.Errorf(errcode.CodeBadRequest, "batch: want {\"records\":[{\"data\":\"<base64>\"},…]}: %v", err))
		return
	}
	if dec.More() {
		writeError(w, errcode.Errorf(errcode.CodeBadRequest, "batch: data after the JSON object"))
		return
	}
	if n := len(in.Records); n == 0 || n > replication.MaxBatchRecords {
		writeError(w, errcode.Errorf(errcode.CodeBadRequest, "batch of %d records: want 1..%d", n, replication.MaxBatchRecords))
		return
	}
	recs := make([][]byte, len(in.Records))
	for i, rec := range in.Records {
		if len(rec.Data) == 0 {
			writeError(w, errcode.Errorf(errcode.CodeBadRequest, "batch: record %d is empty: a record must have at least one byte", i+1))
			return
		}
		recs[i] = rec.Data
	}
	d.appendRecords(w, r, body, recs, true)
}

// appendRecords appends recs (the request's records; body its raw body,
// for a forward) here or where the cell is, and answers.
func (d *Daemon) appendRecords(w http.ResponseWriter, r *http.Request, body []byte, recs [][]byte, batch bool) {
	opts, err := appendOptions(r)
	if err != nil {
		writeError(w, err)
		return
	}
	// A keyed append tried again on a retired cell is recognised by the
	// new log if its first try landed after all.
	var res replication.BatchResult
	c, answered, err := d.onHolder(w, r, body, r.PathValue("cell"), func(c *holding) (err error) {
		res, err = c.log.AppendBatch(r.Context(), c.lease, recs, opts)
		return err
	})
	if answered {
		return
	}
	d.m.appends.WithLabelValues(resultOf(err)).Inc()
	if err != nil {
		writeError(w, err)
		return
	}
	if res.Replayed {
		w.Header().Set(HeaderReplayed, "true")
	}
	if batch {
		writeJSONStatus(w, http.StatusOK, client.BatchResult{Cell: c.name, Epoch: res.Epoch, TxID: uint64(res.TxID), FirstPos: uint64(res.FirstPos), LastPos: uint64(res.LastPos), TS: res.TS})
		return
	}
	writeJSONStatus(w, http.StatusOK, client.AppendResult{Cell: c.name, Epoch: res.Epoch, TxID: uint64(res.TxID), Pos: uint64(res.FirstPos), TS: res.TS})
}

func (d *Daemon) readCell(w http.ResponseWriter, r *http.Request, cfg APIConfig) {
	maxLimit, maxWaiting := cfg.MaxLimit, cfg.MaxWaitingReads
	name := r.PathValue("cell")
	if err := owner.ValidateName("cell", name); err != nil {
		writeError(w, err)
		return
	}
	q := r.URL.Query()
	after, err := uintParam(q.Get("after"), "after", 0)
	if err != nil {
		writeError(w, err)
		return
	}
	limit, err := uintParam(q.Get("limit"), "limit", 100)
	if err != nil || limit == 0 || limit > uint64(maxLimit) {
		writeError(w, errcode.Errorf(errcode.CodeBadRequest, "limit must be 1..%d", maxLimit))
		return
	}
	barrier, err := boolParam(r, "barrier")
	if err != nil {
		writeError(w, err)
		return
	}
	wait, err := waitParam(q.Get("wait"))
	if err != nil {
		writeError(w, err)
		return
	}
	follow, err := boolParam(r, "follow")
	if err != nil {
		writeError(w, err)
		return
	}
	if _, peer := peerOf(r.Context()); follow && !peer {
		d.startStream(w, r, name, replication.Pos(after), int(limit), barrier || q.Has("wait"), cfg.MaxFollowers)
		return
	}
	if wait > 0 {
		if n := d.waiting.Add(1); n > int64(maxWaiting) {
			d.waiting.Add(-1)
			w.Header().Set("Retry-After", "1")
			writeError(w, errcode.Errorf(errcode.CodeBusy, "read %s with wait: this node (%s) already serves %d waiting reads (--max-waiting-reads); retry later, through another node, or without ?wait=", name, d.cfg.Node, maxWaiting))
			return
		}
		defer d.waiting.Add(-1)
		if d.forwardWait(w, r, name, wait) {
			return
		}
	}
	recs, done, err := d.readWaiting(w, r, name, replication.Pos(after), int(limit), barrier, wait)
	if done {
		return
	}
	if _, peer := peerOf(r.Context()); peer && d.held(name) == nil {
		w.Header().Set(headerNotHeld, "true")
	}
	if err != nil {
		writeError(w, err)
		return
	}
	next := after
	if len(recs) > 0 {
		next = uint64(recs[len(recs)-1].Pos)
	}
	writeJSONStatus(w, http.StatusOK, client.ReadResult{Cell: name, Records: apiRecords(recs), NextAfter: next})
}

// onHolder routes a write (an append, a snapshot, a trim; body its raw
// body, for a forward) as an append is routed and, when it is served here,
// runs op on cell name held here, claiming it first if it is free. A cell
// retired under op (released, moved, idle) refused it unwritten: op is
// tried again on the cell as it is now, at most maxRetiredRetries times.
// answered is true when the request was sent on instead (route, reroute);
// otherwise err is what the client is told: the acquire's failure as
// appendNotSent says (c nil), or op's as closedUnder says.
func (d *Daemon) onHolder(w http.ResponseWriter, r *http.Request, body []byte, name string, op func(*holding) error) (c *holding, answered bool, err error) {
	if d.route(w, r, body) {
		return nil, true, nil
	}
	for range maxRetiredRetries {
		c, err = d.acquire(r.Context(), name, false)
		if err != nil {
			if d.reroute(w, r, body, err) {
				return nil, true, nil
			}
			return nil, false, appendNotSent(err)
		}
		c.c.begin()
		err = op(c)
		c.c.end()
		if !c.retiredUnder(err) {
			break
		}
	}
	return c, false, closedUnder(c, err)
}

// maxRetiredRetries bounds how often one request is retried because the
// cell was retired under it; each retry waits for a retire to finish, so
// only a cell retired again and again runs out.
const maxRetiredRetries = 4

// appendNotSent is the answer of an append that failed before its record
// was sent: the claim that had to come first failed. A claim of unknown
// outcome (DEED-E012) is the claim's doubt, not the record's: the record was
// never written, so the append answers DEED-E011 (retry), applied "no".
func appendNotSent(err error) error {
	if errcode.CodeOf(err) != errcode.CodeAmbiguous {
		return err
	}
	return errcode.Errorf(errcode.CodeUnavailable, "append: not written: the claim that must come first has an unknown outcome: %v", err)
}

// resultOf is the result label of an append in deed_appends_total; an
// append of unknown outcome (DEED-E012) counts as "unknown", never as an
// error that wrote nothing.
func resultOf(err error) string {
	switch errcode.CodeOf(err) {
	case "":
		return "ok"
	case errcode.CodeAmbiguous:
		return "unknown"
	case errcode.CodeSuperseded, errcode.CodeNodeFenced, errcode.CodeReleased:
		return "fenced"
	case errcode.CodeHeld:
		return "held"
	default:
		return "error"
	}
}

func boolParam(r *http.Request, name string) (bool, error) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return false, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, errcode.Errorf(errcode.CodeBadRequest, "?%s=%q: want true or false", name, s)
	}
	return v, nil
}

func uintParam(s, name string, def uint64) (uint64, error) {
	if s == "" {
		return def, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, errcode.Errorf(errcode.CodeBadRequest, "?%s=%q: want a non-negative integer", name, s)
	}
	return v, nil
}

// httpStatus maps a code to the HTTP status of its error body.
func httpStatus(code errcode.Code) int {
	switch code {
	case errcode.CodeInvalidName, errcode.CodeBadRequest, errcode.CodeInvalidLease:
		return http.StatusBadRequest
	case errcode.CodeUnauthorized:
		return http.StatusUnauthorized
	case errcode.CodeCrossSite:
		return http.StatusForbidden
	case errcode.CodeHeld, errcode.CodeSuperseded, errcode.CodeReleased, errcode.CodeNotHolder:
		return http.StatusConflict
	case errcode.CodeNodeFenced, errcode.CodeContract, errcode.CodeUnavailable, errcode.CodeAmbiguous, errcode.CodePeer, errcode.CodeBusy:
		return http.StatusServiceUnavailable
	case errcode.CodePosMismatch:
		return http.StatusPreconditionFailed
	case errcode.CodeKeyReused:
		return http.StatusUnprocessableEntity
	case errcode.CodeNoSnapshot:
		return http.StatusNotFound
	case errcode.CodeTrimmed:
		return http.StatusGone
	default:
		return http.StatusInternalServerError
	}
}

func writeError(w http.ResponseWriter, err error) {
	writeErrorStatus(w, 0, err)
}

func writeErrorStatus(w http.ResponseWriter, status int, err error) {
	body := errorBodyOf(err)
	var moved *MovedError
	if errors.As(err, &moved) {
		// The sender may be the node the cell went to (the loop rule kept
		// this node from forwarding back): it serves the request itself.
		w.Header().Set(headerMovedTo, moved.Node)
	}
	if body.FirstPos != nil {
		w.Header().Set(HeaderFirstPos, strconv.FormatUint(*body.FirstPos, 10))
	}
	if status == 0 {
		status = httpStatus(body.Code)
	}
	writeJSONStatus(w, status, body)
}

// errorBodyOf is the DEED error body of err, as an error answer and an
// event stream's closing event "error" both carry it: the code, the
// message led by it, whether it was applied, and what a refusal names
// (the holder, the next position, the first position still served).
func errorBodyOf(err error) client.ErrorBody {
	// The code is the error's own, whatever it wraps: an append cut off by
	// a cancelled context while its PUT was in flight is DEED-E012 and must
	// not read as a retryable DEED-E011.
	code := errcode.CodeOf(err)
	body := client.ErrorBody{Code: code, Error: err.Error(), Applied: client.AppliedOf(err)}
	var held *owner.HeldError
	if errors.As(err, &held) {
		body.Owner, body.OwnerAddr = held.Owner, held.Addr
	}
	var mm *replication.MismatchError
	if errors.As(err, &mm) {
		next := uint64(mm.NextPos)
		body.NextPos = &next
	}
	var trimmed *replication.TrimmedError
	if errors.As(err, &trimmed) {
		first := uint64(trimmed.First)
		body.FirstPos = &first
	}
	if !strings.HasPrefix(body.Error, string(code)) {
		body.Error = fmt.Sprintf("%s %s", code, body.Error)
	}
	return body
}

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
