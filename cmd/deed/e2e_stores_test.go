package main

import (
	"os"
	"strings"
	"testing"

	"github.com/deedkit/deed/bucket/storetest"
)

// TestE2EStores runs the probe, a short bench and the daemon scenarios of the S3
// end-to-end tests with the real binary on gs:// and az:// buckets, against
// fake-gcs-server and Azurite (bucket/storetest; skipped with a log line
// when DEED_FAKEGCS / DEED_AZURITE are unset, as in `make test`).
func TestE2EStores(t *testing.T) {
	if os.Getenv(storetest.EnvFakeGCS) == "" && os.Getenv(storetest.EnvAzurite) == "" {
		t.Skipf("no emulator: %s and %s are unset (make test-stores sets them)", storetest.EnvFakeGCS, storetest.EnvAzurite)
	}
	deedBinary(t)
	scenarios := []struct {
		name string
		run  func(*testing.T, *e2eCluster)
	}{
		{"forced-claim", e2eForcedClaim},
		{"kill9-takeover", e2eKill9Takeover},
		{"sigterm-drains", e2eSigtermDrains},
	}
	for _, start := range []func(testing.TB) (storetest.Target, bool){storetest.FakeGCS, storetest.Azurite} {
		tg, ok := start(t)
		if !ok {
			continue
		}
		t.Run(tg.Name, func(t *testing.T) {
			t.Run("probe", func(t *testing.T) {
				c := storeCluster(tg, "probe")
				st, out := c.cli(t, "probe", "--bucket", tg.Loc.String()+"/probe")
				t.Logf("deed probe on %s:\n%s", tg.Name, out)
				if st != 0 || !strings.Contains(out, "verdict: PASS") {
					t.Fatalf("deed probe on %s: exit %d:\n%s", tg.Name, st, out)
				}
			})
			t.Run("bench", func(t *testing.T) {
				c := storeCluster(tg, "bench")
				st, out := c.cli(t, "bench", "--ops", "20", "--json")
				if st != 0 || !strings.Contains(out, `"append"`) {
					t.Fatalf("deed bench on %s: exit %d:\n%s", tg.Name, st, out)
				}
				t.Logf("deed bench on %s: %s", tg.Name, out)
			})
			for _, sc := range scenarios {
				t.Run(sc.name, func(t *testing.T) { sc.run(t, storeCluster(tg, sc.name)) })
			}
		})
	}
}

// storeCluster is the environment for deed processes on tg, in a prefix
// of its own.
func storeCluster(tg storetest.Target, prefix string) *e2eCluster {
	env := append([]string{"DEED_BUCKET=" + tg.Loc.String() + "/" + prefix}, tg.Env...)
	if tg.Loc.Scheme == "gs" {
		env = append(env, "DEED_ENDPOINT="+tg.Endpoint)
	}
	return &e2eCluster{env: env}
}
