package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const testVersion = "v0.0.0-imagecheck"

// buildDeed builds the static linux deed binary for this machine's
// architecture, as `make image` does.
func buildDeed(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "deed")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+testVersion, "-o", out, "./cmd/deed")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// TestImage builds the image twice through the command's own path (tarball
// and OCI layout) and checks: the same digest and the same tarball bytes
// both times, the config (entrypoint, a non-root user, working directory),
// and that the binary taken out of the layer is the one built and runs.
func TestImage(t *testing.T) {
	bin := buildDeed(t)
	dir := t.TempDir()
	var digests []v1.Hash
	var sums [][32]byte
	for i := range 2 {
		tb := filepath.Join(dir, "image"+string(rune('a'+i))+".tar")
		oci := filepath.Join(dir, "oci"+string(rune('a'+i)))
		if err := run(bin, runtime.GOARCH, testVersion, "deed:"+testVersion, tb, oci, ""); err != nil {
			t.Fatal(err)
		}
		// The OCI layout keeps the manifest as built; a docker-format
		// tarball keeps the config and layers (its reader recomputes a
		// manifest), so the two must agree on the config.
		idx, err := layout.ImageIndexFromPath(oci)
		if err != nil {
			t.Fatal(err)
		}
		im, err := idx.IndexManifest()
		if err != nil || len(im.Manifests) != 1 {
			t.Fatalf("OCI layout: %+v (%v), want one image", im, err)
		}
		d := im.Manifests[0].Digest
		fromLayout, err := idx.Image(d)
		if err != nil {
			t.Fatal(err)
		}
		fromTarball, err := tarball.ImageFromPath(tb, nil)
		if err != nil {
			t.Fatal(err)
		}
		c1, err1 := fromLayout.ConfigName()
		c2, err2 := fromTarball.ConfigName()
		if err1 != nil || err2 != nil || c1 != c2 {
			t.Fatalf("config in the OCI layout %v (%v), in the tarball %v (%v)", c1, err1, c2, err2)
		}
		digests = append(digests, d)
		raw, err := os.ReadFile(tb)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, sha256.Sum256(raw))
	}
	if digests[0] != digests[1] || sums[0] != sums[1] {
		t.Fatalf("two builds differ: digests %v, tarball sha256 %x / %x", digests, sums[0], sums[1])
	}
	t.Logf("image digest %s", digests[0])

	img, err := tarball.ImageFromPath(filepath.Join(dir, "imagea.tar"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/deed"}) || c.User != "65532:65532" || c.WorkingDir != "/data" ||
		cf.OS != "linux" || cf.Architecture != runtime.GOARCH || c.Labels["org.opencontainers.image.version"] != testVersion {
		t.Fatalf("config: %+v (os %s arch %s)", c, cf.OS, cf.Architecture)
	}
	if u, _, _ := strings.Cut(c.User, ":"); u == "" || u == "0" || u == "root" {
		t.Fatalf("image runs as root (%q)", c.User)
	}
	if !cf.Created.Time.Equal(epoch) {
		t.Fatalf("created %v, want the fixed %v", cf.Created, epoch)
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var inImage []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !h.ModTime.Equal(epoch) {
			t.Errorf("%s: mtime %v, want %v", h.Name, h.ModTime, epoch)
		}
		switch h.Name {
		case "usr/local/bin/deed":
			if h.Mode&0o111 == 0 {
				t.Errorf("deed in the image is not executable (%o)", h.Mode)
			}
			inImage, _ = io.ReadAll(tr)
		case "data/":
			if h.Uid != 65532 {
				t.Errorf("/data is owned by %d, want 65532", h.Uid)
			}
		}
	}
	want, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(inImage, want) {
		t.Fatalf("the layer's deed (%d bytes) is not the binary built (%d bytes)", len(inImage), len(want))
	}
	if runtime.GOOS != "linux" {
		t.Skip("the image's binary is for linux; not running it on " + runtime.GOOS)
	}
	extracted := filepath.Join(dir, "deed-from-image")
	if err := os.WriteFile(extracted, inImage, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(extracted, "version").CombinedOutput()
	if err != nil || !strings.HasPrefix(string(out), "deed "+testVersion+" (") {
		t.Fatalf("deed version from the image: %q (%v)", out, err)
	}
}
