package model

import (
	"flag"
	"fmt"
	"testing"
)

var large = flag.Bool("model.large", false, "explore the larger bound (three data owners; make sim)")

// Bounds: epochs 1..maxE-1 (0 is the origin's virtual seal), slots
// 1..maxT-1.
const (
	maxE = 6
	maxT = 5
)

type kind uint8

const (
	none kind = iota
	rec
	seal
	tomb
)

// record is own.json.
type record struct {
	exists bool
	epoch  uint8
	holder int8  // -1: released
	ver    uint8 // the ETag: every write changes it
	end    uint8 // Fast: the slot its releaser sealed (0: none)
	// annc (Cold): an epoch that may write without an announcement
	// marker, which every successor treats as announced: set by a claim
	// that took a release's end, carried by every later write of
	// own.json until a release that names its end (0: none).
	annc uint8
}

type pc uint8

const (
	readOwn pc = iota
	putOwn
	announce
	recheck
	sealCheck
	sealEarly
	list
	walk
	write
	sealEnd
	release
	done
)

// step is the walk's next request: create-only fill of (y, t) with k,
// or the read of E's own first slot (k == none).
type step struct {
	y, t uint8
	k    kind
}

type actor struct {
	pc       pc
	lockOnly bool
	rounds   uint8 // claims left, each followed by a release
	recs     uint8 // records per round
	left     uint8 // records left in this round

	seen    record // own.json as read by the claim
	epoch   uint8
	myVer   uint8
	viaEnd  bool  // Fast: this claim took a release record's end
	annList uint8 // the LIST's announced epochs (bit e)
	at      step
	next    uint8 // next slot to write

	// Cold: what the actor knows of its own last release.
	relVer uint8 // the version its release wrote (0: none)
	sealOK bool  // the seal before that release is known to have landed
	early  uint8 // the seal read before the claim: 0 not read, 1 sealed, 2 not
}

type state struct {
	own    record
	slots  [maxE][maxT]kind
	ann    uint8  // announcement markers (bit e)
	acked  uint32 // acknowledged records (bit e*maxT+t)
	actors [4]actor
}

// rule is what is checked: Current, or Fast with or without a broken knob.
type rule struct {
	fast1       bool // a create-only claim (epoch 1) writes slot 1 at once; every LIST counts epoch 1 announced
	fastRelease bool // a release says its sealed end; the next epoch starts there after announce, re-check and a read of the seal
	// broken variants
	noImplicit1 bool // fast1, but LISTs do not count epoch 1 announced
	noSealCheck bool // fastRelease trusts the end without reading the seal
	noAnnounceB bool // fastRelease skips the announcement and the re-check
	noRecheckB  bool // fastRelease announces but does not re-check
	noRecheck   bool // (current rule too) no re-check at all

	// Cold: a claim that took a release's end announces its epoch in its
	// own claim record (annc) instead of a marker and needs no re-check;
	// every successor's walk counts the record's annc announced.
	recordAnnounces bool
	// Cold: a claim on the actor's own release, whose seal it knows
	// landed, trusts the end without reading the seal.
	ownEnd bool
	// Cold: the seal is read concurrently with the claim: the read may be
	// served before the claim's PUT.
	earlySeal bool
	// broken variants of Cold
	notCarried   bool // a claim that does not take an end drops annc
	clearedByAny bool // any release clears annc, also one without an end
	walkIgnores  bool // a walk does not count the replaced record's annc
	ownAfterLost bool // the own end is trusted although its seal was lost
	noRecordAnn  bool // recordAnnounces skips the marker but writes no annc
}

var (
	current = rule{}
	fast    = rule{fast1: true, fastRelease: true}
	cold    = rule{fast1: true, fastRelease: true, recordAnnounces: true, ownEnd: true, earlySeal: true}
)

// viaEnd reports whether a claim over seen at epoch seen.epoch+1 takes
// its released end.
func (r rule) viaEnd(seen record) bool {
	return r.fastRelease && seen.exists && seen.holder == -1 && seen.end != 0
}

// trustsOwn reports whether actor a, about to claim over seen, trusts the
// end without reading the seal: seen is exactly its own release.
func (r rule) trustsOwn(a *actor, seen record) bool {
	return r.ownEnd && r.viaEnd(seen) && a.relVer != 0 && seen.ver == a.relVer && (a.sealOK || r.ownAfterLost)
}

func bit(e, t uint8) uint32 { return 1 << (uint32(e)*maxT + uint32(t)) }

// announced is every epoch a LIST reports announced: markers, epochs
// holding any file, and epoch 1 under fast1.
func (r rule) announced(s *state) uint8 {
	a := s.ann
	for e := uint8(1); e < maxE; e++ {
		for t := uint8(1); t < maxT; t++ {
			if s.slots[e][t] != none {
				a |= 1 << e
			}
		}
	}
	if r.fast1 && !r.noImplicit1 {
		a |= 1 << 1
	}
	return a
}

// chain is what a restore reads now (the restore rule of docs/design.md,
// with a LIST taken now): the set of record slots on the chain.
func (r rule) chain(s *state) uint32 {
	ann := r.announced(s)
	var on uint32
	x, t := uint8(0), uint8(1)
	for {
		y := uint8(0)
		for e := x + 1; e < maxE; e++ {
			if ann&(1<<e) != 0 && t < maxT && s.slots[e][t] == rec {
				y = e
				break
			}
		}
		if y == 0 {
			return on
		}
		for t < maxT && s.slots[y][t] == rec {
			on |= bit(y, t)
			t++
		}
		if t >= maxT || s.slots[y][t] == none {
			return on
		}
		x = y
	}
}

// scanFrom is the walk's next request at a seal or tombstone in epoch x
// at slot t: a tombstone at t of the next listed epoch between x and E,
// else the read of E's own slot t.
func scanFrom(a *actor, x, t uint8) step {
	for y := x + 1; y < a.epoch; y++ {
		if a.annList&(1<<y) != 0 {
			return step{y: y, t: t, k: tomb}
		}
	}
	return step{y: a.epoch, t: t, k: none}
}

// create is a create-only PUT: it writes k at (e, t) if the slot is free
// and returns what the slot holds afterwards.
func create(s *state, e, t uint8, k kind) kind {
	if s.slots[e][t] == none {
		s.slots[e][t] = k
		return k
	}
	return s.slots[e][t]
}

// do runs actor i's next request (or a decision without one) on s. lost
// is true for a write whose request was lost before it applied (only the
// releaser's seal: it releases anyway); at readOwn under earlySeal it
// means the concurrent read of the seal is served after the claim. It returns false when the step
// does not apply (bound exhausted).
func (r rule) do(s *state, i int, lost bool) bool {
	a := &s.actors[i]
	switch a.pc {
	case readOwn:
		a.seen = s.own
		if a.seen.exists && a.seen.epoch+1 >= maxE {
			a.pc = done // the bound on epochs
			return true
		}
		a.pc = putOwn
		a.early = 0
		if r.earlySeal && !a.lockOnly && r.viaEnd(a.seen) && !r.trustsOwn(a, a.seen) {
			a.pc = sealEarly
			if lost { // the concurrent read is served after the claim
				a.pc = putOwn
			}
		}
	case sealEarly:
		a.early = 2
		if k := s.slots[a.seen.epoch][a.seen.end]; r.noSealCheck || k == seal || k == tomb {
			a.early = 1
		}
		a.pc = putOwn
	case putOwn:
		ok := !a.seen.exists && !s.own.exists || a.seen.exists && s.own.exists && s.own.ver == a.seen.ver
		if !ok { // 412: read and decide again
			a.pc = readOwn
			return true
		}
		a.epoch = 1
		if a.seen.exists {
			a.epoch = a.seen.epoch + 1
		}
		carry := a.seen.annc
		if r.notCarried {
			carry = 0
		}
		if r.recordAnnounces && !a.lockOnly && r.viaEnd(a.seen) && !r.noRecordAnn {
			carry = a.epoch
		}
		s.own = record{exists: true, epoch: a.epoch, holder: int8(i), ver: s.own.ver + 1, annc: carry}
		a.myVer = s.own.ver
		a.left = a.recs
		a.viaEnd = false
		switch {
		case a.lockOnly:
			a.pc = release
		case r.fast1 && !a.seen.exists:
			a.next, a.pc = 1, write
		case r.viaEnd(a.seen) && a.epoch == a.seen.epoch+1:
			a.viaEnd = true
			a.pc = announce
			switch {
			case r.noAnnounceB:
				a.pc = sealCheck
			case r.recordAnnounces && r.trustsOwn(a, a.seen):
				taken.ownEnd++
				a.next, a.pc = a.seen.end, write
			case r.recordAnnounces && a.early == 1:
				taken.earlySeal++
				a.next, a.pc = a.seen.end, write
			case r.recordAnnounces && a.early == 2:
				a.pc = list
			case r.recordAnnounces:
				a.pc = sealCheck
			}
		default:
			a.pc = announce
		}
	case announce:
		s.ann |= 1 << a.epoch
		a.pc = recheck
		if r.noRecheck || a.viaEnd && r.noRecheckB {
			a.pc = list
			if a.viaEnd {
				a.pc = sealCheck
			}
		}
	case recheck:
		if s.own.epoch > a.epoch {
			a.pc = done // fenced before it opened
			return true
		}
		a.pc = list
		if a.viaEnd {
			a.pc = sealCheck
		}
	case sealCheck:
		if k := s.slots[a.seen.epoch][a.seen.end]; r.noSealCheck || k == seal || k == tomb {
			a.next, a.pc = a.seen.end, write
		} else {
			a.pc = list // the end is not sealed: walk
		}
	case list:
		a.annList = r.announced(s)
		if a.seen.annc != 0 && !r.walkIgnores {
			a.annList |= 1 << a.seen.annc // the replaced record's unmarked epoch
			taken.recordAnn++
		}
		a.at = scanFrom(a, 0, 1)
		a.pc = walk
	case walk:
		at := a.at
		if at.k == none { // E's own slot
			if s.slots[at.y][at.t] == none {
				a.next, a.pc = at.t, write
			} else {
				a.pc = done // fenced
			}
			return true
		}
		if at.t >= maxT {
			return false
		}
		switch create(s, at.y, at.t, at.k) {
		case rec:
			a.at = step{y: at.y, t: at.t + 1, k: seal}
		default:
			a.at = scanFrom(a, at.y, at.t)
		}
	case write:
		if a.next >= maxT {
			return false
		}
		if create(s, a.epoch, a.next, rec) != rec || s.slots[a.epoch][a.next] != rec {
			a.pc = done // 412 on a seal or tombstone: fenced
			return true
		}
		s.acked |= bit(a.epoch, a.next)
		a.next++
		a.left--
		if a.left == 0 {
			a.pc = sealEnd
		}
	case sealEnd:
		if a.next >= maxT {
			return false
		}
		if !lost && create(s, a.epoch, a.next, seal) != seal {
			a.pc = done
			return true
		}
		a.sealOK = !lost
		a.pc = release
	case release:
		if s.own.ver != a.myVer {
			a.pc = done
			return true
		}
		s.own = record{exists: true, epoch: a.epoch, holder: -1, ver: s.own.ver + 1, annc: s.own.annc}
		if r.fastRelease && !a.lockOnly {
			s.own.end = a.next
		}
		if s.own.end != 0 || r.clearedByAny {
			s.own.annc = 0 // its chain is sealed (a file of its epoch)
		}
		a.relVer = s.own.ver
		a.rounds--
		a.pc = readOwn
		if a.rounds == 0 {
			a.pc = done
		}
	default:
		return false
	}
	return true
}

func isWrite(p pc) bool {
	return p == putOwn || p == announce || p == walk || p == write || p == sealEnd || p == release
}

// taken counts how often explore took each shortcut of the Cold rule, so
// that a test can show the rule was exercised rather than never reached.
var taken struct{ ownEnd, earlySeal, recordAnn int }

type result struct {
	states int
	bad    string
}

// explore visits every state reachable from s0 under r: at each state,
// any actor not done may send its next request (a write may also lose its
// answer: it applied and the actor crashes), or crash.
func explore(r rule, s0 state, n int) result {
	seen := map[state]bool{s0: true}
	stack := []state{s0}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if on := r.chain(&s); on&s.acked != s.acked {
			return result{len(seen), fmt.Sprintf("acknowledged record lost: acked %b, chain %b, slots %v", s.acked, on, s.slots)}
		}
		for i := range n {
			if s.actors[i].pc == done {
				continue
			}
			var succ []state
			t := s
			if r.do(&t, i, false) {
				succ = append(succ, t)
				if isWrite(s.actors[i].pc) {
					c := t
					c.actors[i].pc = done // the answer was lost
					succ = append(succ, c)
				}
			}
			if p := s.actors[i].pc; p == sealEnd || p == readOwn && r.earlySeal {
				t := s
				if r.do(&t, i, true) {
					succ = append(succ, t)
				}
			}
			c := s
			c.actors[i].pc = done // crash
			succ = append(succ, c)
			for _, t := range succ {
				if !seen[t] {
					seen[t] = true
					stack = append(stack, t)
				}
			}
		}
	}
	return result{states: len(seen)}
}

// world is the bound: data owners (the first claims, releases and claims
// again) and a lock-only claimer.
func world() (state, int) {
	var s state
	s.actors[0] = actor{rounds: 2, recs: 1}
	s.actors[1] = actor{rounds: 1, recs: 1}
	s.actors[2] = actor{lockOnly: true, rounds: 1}
	n := 3
	if *large {
		s.actors[3] = actor{rounds: 1, recs: 1}
		n = 4
	}
	return s, n
}

func TestModel(t *testing.T) {
	s0, n := world()
	for _, c := range []struct {
		name string
		r    rule
	}{{"current", current}, {"fast", fast}, {"cold", cold}} {
		taken.ownEnd, taken.earlySeal, taken.recordAnn = 0, 0, 0
		res := explore(c.r, s0, n)
		t.Logf("%s rule: %d states explored (%d actors)", c.name, res.states, n)
		if res.bad != "" {
			t.Errorf("%s rule: %s", c.name, res.bad)
		}
		if c.r == cold {
			t.Logf("cold rule's shortcuts taken: own end trusted %d times, seal read before the claim %d, a walk counting a record's unmarked epoch %d",
				taken.ownEnd, taken.earlySeal, taken.recordAnn)
			if taken.ownEnd == 0 || taken.earlySeal == 0 || taken.recordAnn == 0 {
				t.Error("a shortcut of the cold rule was never taken: the bound does not exercise it")
			}
		}
	}
}

func TestModelCatchesBrokenRules(t *testing.T) {
	s0, n := world()
	for _, c := range []struct {
		name string
		r    rule
	}{
		{"current-no-recheck", rule{noRecheck: true}},
		{"fast-epoch1-not-implicit", rule{fast1: true, fastRelease: true, noImplicit1: true}},
		{"fast-end-without-seal-check", rule{fast1: true, fastRelease: true, noSealCheck: true}},
		{"fast-end-without-announce", rule{fast1: true, fastRelease: true, noAnnounceB: true}},
		{"fast-end-without-recheck", rule{fast1: true, fastRelease: true, noRecheckB: true}},
		{"cold-record-announces-nothing", withCold(func(r *rule) { r.noRecordAnn = true })},
		{"cold-annc-not-carried", withCold(func(r *rule) { r.notCarried = true })},
		{"cold-annc-cleared-by-any-release", withCold(func(r *rule) { r.clearedByAny = true })},
		{"cold-walk-ignores-annc", withCold(func(r *rule) { r.walkIgnores = true })},
		{"cold-own-end-after-lost-seal", withCold(func(r *rule) { r.ownAfterLost = true })},
		{"cold-early-seal-not-checked", withCold(func(r *rule) { r.noSealCheck = true })},
	} {
		res := explore(c.r, s0, n)
		if res.bad == "" {
			t.Errorf("%s: not caught (%d states)", c.name, res.states)
			continue
		}
		t.Logf("%s: caught after %d states: %s", c.name, res.states, res.bad)
	}
}

// withCold is the Cold rule with one knob of f's turned.
func withCold(f func(*rule)) rule {
	r := cold
	f(&r)
	return r
}
