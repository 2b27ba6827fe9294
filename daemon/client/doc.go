// Package client is a Go client for the HTTP API of a deed node daemon
// (`deed run`, package daemon), and the API's wire types, which the daemon
// serves. An application in Go talks to deed through it without writing
// JSON: every failure is an *Error that carries its DEED code and whether
// the request may have taken effect ("applied": no or unknown).
//
// The package depends only on the standard library and package bucket (for
// the codes), so importing it does not pull in the daemon.
package client
