package owner

import (
	"github.com/deedkit/deed/errcode"
)

// MaxNameLen bounds cell and node names. 200 bytes keeps every derived key
// (cells/<cell>/ltx/e<epoch>/<txid>.snapshot) well inside S3's 1024.
const MaxNameLen = 200

// ValidateName checks a cell or node name: 1–200 bytes of [A-Za-z0-9._-],
// not "." or "..". kind is "cell" or "node" and appears in the message.
// Names are checked before any request is sent, so a bad name writes nothing.
func ValidateName(kind, name string) error {
	if name == "" {
		return errcode.Errorf(errcode.CodeInvalidName, "invalid %s name: empty", kind)
	}
	if len(name) > MaxNameLen {
		return errcode.Errorf(errcode.CodeInvalidName, "invalid %s name %.32q...: %d bytes, limit %d", kind, name, len(name), MaxNameLen)
	}
	if name == "." || name == ".." {
		return errcode.Errorf(errcode.CodeInvalidName, "invalid %s name %q", kind, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return errcode.Errorf(errcode.CodeInvalidName, "invalid %s name %q: byte %d (%q) is not one of [A-Za-z0-9._-]", kind, name, i, c)
		}
	}
	return nil
}

// CellPrefix is the key prefix of everything a cell owns.
func CellPrefix(cell string) string { return "cells/" + cell + "/" }

// CellKey is the key of a cell's ownership record.
func CellKey(cell string) string { return CellPrefix(cell) + "own.json" }

// NodeKey is the key of a node's lease.
func NodeKey(node string) string { return NodesPrefix + node + ".json" }

// NodesPrefix is the prefix listed to observe every node lease at once.
const NodesPrefix = "nodes/"
