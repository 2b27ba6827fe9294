//go:build deedbroken

package replication_test

import (
	"testing"

	"github.com/deedkit/deed/replication"
)

// The checks of keyed and conditional appends catch each broken rule.

func TestBrokenForgetKeysDuplicates(t *testing.T) {
	defer replication.SetBrokenForgetKeys(true)()
	if err := keyedAcrossOwners(t, false); err == nil {
		t.Fatal("the check did not catch the broken rule")
	} else {
		t.Log(err)
	}
}

func TestBrokenReplayPosAnswersAnotherPosition(t *testing.T) {
	defer replication.SetBrokenReplayPos(true)()
	if err := keyedAcrossOwners(t, false); err == nil {
		t.Fatal("the check did not catch the broken rule")
	} else {
		t.Log(err)
	}
}

func TestBrokenStaleMatchLetsTwoWin(t *testing.T) {
	defer replication.SetBrokenStaleMatch(true)()
	if err := matchPosRace(t); err == nil {
		t.Fatal("the check did not catch the broken rule")
	} else {
		t.Log(err)
	}
}

func TestBrokenMismatchUnprovedAnswersAStaleEnd(t *testing.T) {
	defer replication.SetBrokenMismatchUnproved(true)()
	if err := pastTheEndOnAFencedOwner(t); err == nil {
		t.Fatal("the check did not catch the broken rule")
	} else {
		t.Log(err)
	}
}

func TestBrokenMismatchUnprovedBehindAFailedCommit(t *testing.T) {
	defer replication.SetBrokenMismatchUnproved(true)()
	if err := behindAFailedCommit(t); err == nil {
		t.Fatal("the check did not catch the broken rule")
	} else {
		t.Log(err)
	}
}
