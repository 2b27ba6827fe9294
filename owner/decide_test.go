package owner

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/deedkit/deed/errcode"
)

func TestDecide(t *testing.T) {
	p := Params{TTL: 10 * time.Second, Margin: time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	live := Observation{Node: "b", Exists: true, ETag: "x", FirstSeen: t0, Addr: "b:1"}
	rec := func(node string, epoch uint64) Current {
		return Current{Exists: true, Record: Record{Node: node, Epoch: epoch, Nonce: "n"}}
	}
	recInc := func(node string, epoch uint64, inc string) Current {
		c := rec(node, epoch)
		c.Record.Inc = inc
		return c
	}
	// FirstSeen in the future of t0 only to keep Alive true at the times
	// used; the proof rests on Confirmed−FirstSeen alone.
	provenDead := Observation{Node: "b", Exists: true, ETag: "x", Incarnation: "i1",
		FirstSeen: t0.Add(2 * time.Second), Confirmed: t0.Add(14 * time.Second)}
	cases := []struct {
		name   string
		cur    Current
		owner  Observation
		now    time.Time
		force  bool
		action Action
		epoch  uint64
		reason string
	}{
		{"absent", Current{}, Observation{}, t0, false, Create, 1, "absent"},
		{"released", rec("", 4), Observation{}, t0, false, Take, 5, "released"},
		{"re-entry", rec("a", 4), Observation{}, t0, false, Take, 5, "re-entry"},
		{"owner alive", rec("b", 4), live, t0.Add(5 * time.Second), false, Refuse, 0, "owner-alive"},
		{"owner alive at exactly ttl+margin", rec("b", 4), live, t0.Add(11 * time.Second), false, Refuse, 0, "owner-alive"},
		{"owner unchanged past ttl+margin", rec("b", 4), live, t0.Add(11*time.Second + time.Nanosecond), false, Take, 5, "owner-dead"},
		{"owner advertises a longer ttl", rec("b", 4), Observation{Node: "b", Exists: true, ETag: "x", FirstSeen: t0, TTL: time.Minute}, t0.Add(30 * time.Second), false, Refuse, 0, "owner-alive"},
		{"owner lease missing", rec("b", 4), Observation{Node: "b"}, t0, false, Take, 5, "owner-dead"},
		{"owner lease released", rec("b", 4), Observation{Node: "b", Exists: true, Released: true, FirstSeen: t0}, t0, false, Take, 5, "owner-dead"},
		{"forced over live owner", rec("b", 4), live, t0, true, Take, 5, "forced"},
		// A view old enough to look alive at now, but one read of which
		// already proved the record's incarnation dead.
		{"record's incarnation proven dead", recInc("b", 4, "i1"), provenDead, t0.Add(5 * time.Second), false, Take, 5, "owner-dead"},
		{"another incarnation proven dead", recInc("b", 4, "i2"), provenDead, t0.Add(5 * time.Second), false, Refuse, 0, "owner-alive"},
		{"corrupt", Current{Exists: true, Corrupt: true}, Observation{}, t0, false, RefuseCorrupt, 0, "corrupt"},
		{"corrupt forced", Current{Exists: true, Corrupt: true, DataEpoch: 9}, Observation{}, t0, true, Take, 10, "forced"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(c.cur, "a", c.owner, c.now, p, c.force)
			if d.Action != c.action || d.Epoch != c.epoch || d.Reason != c.reason {
				t.Fatalf("Decide = %+v, want %v epoch %d reason %q", d, c.action, c.epoch, c.reason)
			}
		})
	}
}

func TestIncarnationDead(t *testing.T) {
	p := Params{TTL: 10 * time.Second, Margin: time.Second}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seen := Observation{Node: "b", Exists: true, ETag: "x", Incarnation: "i1", FirstSeen: t0}
	with := func(f func(*Observation)) Observation { o := seen; f(&o); return o }
	cases := []struct {
		name string
		o    Observation
		inc  string
		want bool
	}{
		{"confirmed exactly ttl+margin after first sight", with(func(o *Observation) { o.Confirmed = t0.Add(11 * time.Second) }), "i1", false},
		{"confirmed past ttl+margin", with(func(o *Observation) { o.Confirmed = t0.Add(11*time.Second + 1) }), "i1", true},
		{"confirmed past the observer's ttl but not the advertised one", with(func(o *Observation) {
			o.TTL = time.Minute
			o.Confirmed = t0.Add(30 * time.Second)
		}), "i1", false},
		{"released by that incarnation", with(func(o *Observation) { o.Released = true }), "i1", true},
		{"another incarnation", with(func(o *Observation) { o.Confirmed = t0.Add(time.Hour) }), "i2", false},
		{"record names no incarnation", with(func(o *Observation) { o.Confirmed = t0.Add(time.Hour) }), "", false},
		{"lease missing: whose death is unknown", Observation{Node: "b"}, "i1", false},
		{"first read only (sent before first sight)", with(func(o *Observation) { o.Confirmed = t0.Add(-time.Millisecond) }), "i1", false},
	}
	for _, c := range cases {
		if got := IncarnationDead(c.o, c.inc, p); got != c.want {
			t.Errorf("%s: IncarnationDead = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestAliveIgnoresWriterClock(t *testing.T) {
	// The observation has no writer timestamp at all; this pins the rule:
	// only the observer's own first-sight time matters.
	p := Params{TTL: 10 * time.Second, Margin: time.Second}
	now := time.Now()
	o := Observation{Exists: true, ETag: "e", FirstSeen: now}
	if !Alive(o, now.Add(p.TTL+p.Margin), p) || Alive(o, now.Add(p.TTL+p.Margin+1), p) {
		t.Fatal("Alive must flip exactly after TTL+margin of the observer's time")
	}
	// Fence happens strictly before death for any send time <= first sight.
	send := now.Add(-3 * time.Second)
	if !FenceDeadline(send, p).Before(now.Add(p.TTL + p.Margin)) {
		t.Fatal("fence deadline must precede the earliest death verdict")
	}
}

func TestParamsValidate(t *testing.T) {
	for _, c := range []struct {
		ttl, margin time.Duration
		ok          bool
	}{
		{10 * time.Second, time.Second, true},
		{10 * time.Second, 0, true},
		{10 * time.Second, 4 * time.Second, false}, // margin >= ttl/3
		{0, 0, false},
		{3 * time.Second, time.Second, false}, // margin == ttl/3
	} {
		err := Params{TTL: c.ttl, Margin: c.margin}.Validate()
		if (err == nil) != c.ok {
			t.Errorf("ttl %v margin %v: err = %v, want ok=%v", c.ttl, c.margin, err, c.ok)
		}
	}
}

func TestRenewTimeout(t *testing.T) {
	p := Params{TTL: 10 * time.Second, Margin: time.Second}
	now := time.Now()
	if got := RenewTimeout(now, now.Add(9*time.Second), p); got != p.TTL/3 {
		t.Errorf("far from deadline: %v, want ceiling %v", got, p.TTL/3)
	}
	if got := RenewTimeout(now, now.Add(2*time.Second), p); got != time.Second {
		t.Errorf("2s before deadline: %v, want half of it", got)
	}
	if got := RenewTimeout(now, now.Add(300*time.Millisecond), p); got != 200*time.Millisecond {
		t.Errorf("300ms before deadline: %v, want the floor", got)
	}
	if got := RenewTimeout(now, now.Add(time.Millisecond), p); got != time.Millisecond {
		t.Errorf("1ms before deadline: %v, want what is left, not the floor", got)
	}
}

func TestValidateName(t *testing.T) {
	good := []string{"a", "tenant-42", "A.b_c-d", strings.Repeat("x", 200), "..."}
	bad := []string{"", ".", "..", "a/b", "a b", "ü", strings.Repeat("x", 201), "a\x00", "cell*"}
	for _, n := range good {
		if err := ValidateName("cell", n); err != nil {
			t.Errorf("%q: unexpected %v", n, err)
		}
	}
	for _, n := range bad {
		err := ValidateName("cell", n)
		if errcode.CodeOf(err) != errcode.CodeInvalidName || !strings.HasPrefix(err.Error(), "DEED-E001") {
			t.Errorf("%q: got %v, want DEED-E001", n, err)
		}
	}
}

func TestParseRecord(t *testing.T) {
	for _, body := range []string{"", "{", "[]", `{"node":"a"}`, `{"node":"a/b","epoch":1,"nonce":"x"}`, `{"node":"a","epoch":0,"nonce":"x"}`} {
		if _, err := ParseRecord("k", []byte(body)); errcode.CodeOf(err) != errcode.CodeCorruptOwner {
			t.Errorf("%q: got %v, want DEED-E030", body, err)
		}
	}
	r, err := ParseRecord("k", []byte(`{"node":"","epoch":3,"nonce":"x","at_ms":1}`))
	if err != nil || !r.Released() || r.Epoch != 3 {
		t.Fatalf("released record: %+v %v", r, err)
	}
}

func TestGuess(t *testing.T) {
	for _, c := range []struct {
		name   string
		h      Hint
		force  bool
		ok     bool
		action Action
		epoch  uint64
		etag   string
	}{
		{name: "nothing known: create", ok: true, action: Create, epoch: 1},
		{name: "own release: take on its etag", h: Hint{Known: true, ReleasedETag: `"e"`, Epoch: 4}, ok: true, action: Take, epoch: 5, etag: `"e"`},
		{name: "known to exist: read first", h: Hint{Known: true}},
		{name: "forced, nothing known: read first", force: true},
		{name: "forced, own release: read first", h: Hint{Known: true, ReleasedETag: `"e"`, Epoch: 4}, force: true},
		{name: "released at the last epoch: read first", h: Hint{Known: true, ReleasedETag: `"e"`, Epoch: math.MaxUint64}},
	} {
		d, etag, ok := Guess(c.h, c.force)
		if ok != c.ok || d.Action != c.action || d.Epoch != c.epoch || etag != c.etag {
			t.Errorf("%s: got %+v %q %v", c.name, d, etag, ok)
		}
	}
}
