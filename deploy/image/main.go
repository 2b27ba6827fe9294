// Command image builds deed's OCI image from a static linux binary without a
// container daemon or a base image: FROM scratch, one layer holding the
// binary (plus CA certificates and a passwd entry for the non-root user),
// fixed timestamps and ownership, so the same binary always gives the same
// image digest. It writes a tarball that `podman load` and `docker load`
// read, and optionally an OCI image layout directory (for skopeo or crane).
//
// It is its own Go module so that go-containerregistry stays out of deed's
// dependencies.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Where things are in the image, and who runs it.
const (
	binaryPath = "usr/local/bin/deed"
	dataDir    = "data"
	// user is the conventional unprivileged "nonroot" user (as in
	// distroless images); /data is owned by it.
	user = "65532:65532"
)

// epoch is every timestamp in the image, for reproducibility.
var epoch = time.Unix(0, 0).UTC()

// options says what to build.
type options struct {
	Binary  []byte // the static linux deed binary
	Arch    string // GOARCH of the binary
	Version string // deed's version, for the labels
	CACerts []byte // PEM bundle for TLS to the store; none when empty
}

// build assembles the image. It sends nothing anywhere and reads no clock.
func build(o options) (v1.Image, error) {
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	add := func(h *tar.Header, body []byte) error {
		h.ModTime, h.Format = epoch, tar.FormatPAX
		h.Size = int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	dir := func(path string, mode int64, uid int) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeDir, Name: path + "/", Mode: mode, Uid: uid, Gid: uid}
	}
	file := func(path string, mode int64) *tar.Header {
		return &tar.Header{Typeflag: tar.TypeReg, Name: path, Mode: mode}
	}
	entries := []struct {
		h    *tar.Header
		body []byte
	}{
		{dir("etc", 0o755, 0), nil},
		{file("etc/passwd", 0o644), []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/data:/sbin/nologin\n")},
		{file("etc/group", 0o644), []byte("root:x:0:\nnonroot:x:65532:\n")},
		{dir(dataDir, 0o755, 65532), nil},
		{dir("tmp", 0o1777, 0), nil},
		{dir("usr", 0o755, 0), nil},
		{dir("usr/local", 0o755, 0), nil},
		{dir("usr/local/bin", 0o755, 0), nil},
		{file(binaryPath, 0o755), o.Binary},
	}
	if len(o.CACerts) > 0 {
		entries = append(entries[:1], append([]struct {
			h    *tar.Header
			body []byte
		}{
			{dir("etc/ssl", 0o755, 0), nil},
			{dir("etc/ssl/certs", 0o755, 0), nil},
			{file("etc/ssl/certs/ca-certificates.crt", 0o644), o.CACerts},
		}, entries[1:]...)...)
	}
	for _, e := range entries {
		if err := add(e.h, e.body); err != nil {
			return nil, fmt.Errorf("layer %s: %w", e.h.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layerTar := tb.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: "deploy/image: deed " + o.Version, Comment: "static deed binary, FROM scratch"},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: epoch}
	cf.OS, cf.Architecture = "linux", o.Arch
	cf.Config = v1.Config{
		Entrypoint: []string{"/" + binaryPath},
		// The daemon on all interfaces; it refuses to start without a
		// token there (DEED_TOKEN), and without DEED_BUCKET it serves its
		// embedded store from /data.
		Cmd:          []string{"run", "--listen", "0.0.0.0:7480", "--data-dir", "/" + dataDir},
		User:         user,
		WorkingDir:   "/" + dataDir,
		ExposedPorts: map[string]struct{}{"7480/tcp": {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":    "deed",
			"org.opencontainers.image.version":  o.Version,
			"org.opencontainers.image.licenses": "Apache-2.0",
		},
	}
	return mutate.ConfigFile(img, cf)
}

func main() {
	binary := flag.String("binary", "", "static linux deed binary (required)")
	arch := flag.String("arch", "amd64", "GOARCH of the binary")
	version := flag.String("version", "dev", "deed's version, for the image labels")
	tag := flag.String("tag", "deed:dev", "name the tarball gives the image on load")
	out := flag.String("tarball", "", "write a docker/podman-loadable tarball here")
	ociDir := flag.String("oci-layout", "", "also write an OCI image layout directory here")
	ca := flag.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "PEM bundle to include for TLS to the store (empty: none)")
	flag.Parse()
	if err := run(*binary, *arch, *version, *tag, *out, *ociDir, *ca); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(binary, arch, version, tag, out, ociDir, ca string) error {
	if binary == "" || out == "" {
		return fmt.Errorf("-binary and -tarball are required")
	}
	o := options{Arch: arch, Version: version}
	var err error
	if o.Binary, err = os.ReadFile(binary); err != nil {
		return err
	}
	if ca != "" {
		if o.CACerts, err = os.ReadFile(ca); err != nil {
			return fmt.Errorf("-ca-certs: %w (pass -ca-certs '' for an image without them)", err)
		}
	}
	img, err := build(o)
	if err != nil {
		return err
	}
	ref, err := name.NewTag(tag)
	if err != nil {
		return fmt.Errorf("-tag: %w", err)
	}
	if err := tarball.WriteToFile(out, ref, img); err != nil {
		return err
	}
	if ociDir != "" {
		if err := os.RemoveAll(ociDir); err != nil {
			return err
		}
		p, err := layout.Write(ociDir, empty.Index)
		if err != nil {
			return err
		}
		if err := p.AppendImage(img); err != nil {
			return err
		}
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("image %s %s (%s)\n", tag, digest, out)
	return nil
}
