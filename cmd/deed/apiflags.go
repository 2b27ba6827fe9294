package main

import (
	"crypto/tls"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/deedkit/deed/daemon/client"
	"github.com/deedkit/deed/errcode"
)

// The flags of the commands that talk to a daemon (append and read), which
// do so through the Go client of package daemon/client.

const (
	envAddr     = "DEED_ADDR"
	defaultAddr = "http://127.0.0.1:7480"
)

// apiFlags are the flags of the commands that talk to a daemon.
type apiFlags struct {
	addr      string
	token     string
	tokenFile string
	caCert    string
	retryFor  time.Duration // an append's or a read's retries (client.Options.RetryFor); 0: the client's default
}

func (f *apiFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.addr, "addr", defaultAddr, "base URL of a running 'deed run' (env "+envAddr+")")
	cmd.Flags().StringVar(&f.token, "token", "", "bearer token of the daemon's API (env "+envToken+")")
	cmd.Flags().StringVar(&f.tokenFile, "token-file", "", "read the bearer token from this file instead (trailing newline ignored)")
	cmd.Flags().StringVar(&f.caCert, "ca-cert", "", "PEM file of the CA (or the self-signed certificate) to trust for an https --addr, instead of the system's")
}

// client resolves --addr and --token against the environment and checks the
// address; a bad one is DEED-E040 before any request.
func (f *apiFlags) client(cfg *config, cmd *cobra.Command) (*client.Client, error) {
	addr := f.addr
	if !cmd.Flags().Changed("addr") {
		addr = firstNonEmpty(cfg.getenv(envAddr), defaultAddr)
	}
	return f.clientAt(cfg, cmd, addr)
}

// clientAt is client for the daemon at addr (found by the command, e.g. in
// a node lease), with --token, --token-file and --ca-cert.
func (f *apiFlags) clientAt(cfg *config, cmd *cobra.Command, addr string) (*client.Client, error) {
	token := f.token
	switch {
	case f.tokenFile != "" && cmd.Flags().Changed("token"):
		return nil, errBothTokens()
	case f.tokenFile != "":
		t, err := readTokenFile(f.tokenFile)
		if err != nil {
			return nil, err
		}
		token = t
	case !cmd.Flags().Changed("token"):
		token = cfg.getenv(envToken)
	}
	u, err := url.Parse(addr)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, errcode.Errorf(errcode.CodeBadRequest, "--addr %q: want http(s)://HOST:PORT of a running 'deed run'", redactURL(addr))
	}
	hc := &http.Client{Timeout: client.DefaultTimeout}
	if f.caCert != "" {
		if u.Scheme != "https" {
			return nil, errcode.Errorf(errcode.CodeBadRequest, "--ca-cert is for an https --addr, not %s", addr)
		}
		pool, err := caPool(f.caCert)
		if err != nil {
			return nil, err
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		hc.Transport = tr
	}
	// The token from a file or the environment comes with its newline,
	// which the client trims.
	return client.New(strings.TrimSuffix(addr, "/"), client.Options{Token: token, HTTPClient: hc, RetryFor: f.retryFor})
}

// redactURL masks the password of a URL with user:pass@ in it, for every
// message and log line that names an endpoint; anything that does not
// parse as a URL is returned as it is, as it can carry no userinfo that
// url.Parse would find.
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	return u.Redacted()
}
