package storetest

import "github.com/deedkit/deed/bucket"

// The classification table is shared by bucket's test of Classify and the
// adapters' tests that drive the same answers through their SDKs, so that
// both hold a store's answers to one rule.

// ClassRow is one store answer and the kind each ClassOps column expects.
type ClassRow struct {
	Name   string
	Status int // 0: no response
	Code   string
	Want   [8]error // get head list put put-if-absent put-if-match delete delete-if-match
}

// ClassOp is a column of the classification table: one operation with one
// condition.
type ClassOp struct {
	Name string
	Op   string // as given to bucket.Classify: get, head, list, put, delete
	Cond bucket.Condition
}

// ClassOps are the columns of ClassRow.Want, in order.
var ClassOps = []ClassOp{
	{"get", "get", bucket.None},
	{"head", "head", bucket.None},
	{"list", "list", bucket.None},
	{"put", "put", bucket.None},
	{"put-if-absent", "put", bucket.IfAbsent},
	{"put-if-match", "put", bucket.IfMatch(`"abc"`)},
	{"delete", "delete", bucket.None},
	{"delete-if-match", "delete", bucket.IfMatch(`"abc"`)},
}

// Shorthands for the expected kinds.
var (
	eP = bucket.ErrPrecondition
	eC = bucket.ErrConflict
	eN = bucket.ErrNotFound
	eA = bucket.ErrAmbiguous
	eU = bucket.ErrUnavailable
	eX = bucket.ErrUnsupported
	eD = bucket.ErrAccessDenied
	eB = bucket.ErrNoBucket
)

// ClassRows is the classification table: the response (status 0 = none)
// and the expected kind per column of ClassOps. The rule it pins down: a
// conditional write that reached the store (or may have) and did not get a
// definite answer is ambiguous, never "lost"; one that could not even be
// sent (no connection) was not applied; reads and unconditional writes are
// merely unavailable.
var ClassRows = []ClassRow{
	{"412", 412, "PreconditionFailed", [8]error{eP, eP, eP, eP, eP, eP, eP, eP}},
	{"409 ConditionalRequestConflict", 409, "ConditionalRequestConflict", [8]error{eC, eC, eC, eC, eC, eC, eC, eC}},
	{"409 OperationAborted", 409, "OperationAborted", [8]error{eU, eU, eU, eU, eC, eC, eU, eC}},
	{"409 BlobAlreadyExists", 409, "BlobAlreadyExists", [8]error{eU, eU, eU, eU, eP, eC, eU, eC}},
	{"409 ObjectParentIsFile", 409, "ObjectParentIsFile", [8]error{eX, eX, eX, eX, eX, eX, eX, eX}},
	{"404 NoSuchKey", 404, "NoSuchKey", [8]error{eN, eN, eN, eN, eN, eP, eN, eN}},
	{"404 NoSuchBucket", 404, "NoSuchBucket", [8]error{eB, eB, eB, eB, eA, eA, eB, eA}},
	{"403", 403, "AccessDenied", [8]error{eD, eD, eD, eD, eD, eD, eD, eD}},
	{"501", 501, "NotImplemented", [8]error{eX, eX, eX, eX, eX, eX, eX, eX}},
	{"500", 500, "InternalError", [8]error{eU, eU, eU, eU, eA, eA, eU, eA}},
	{"503", 503, "SlowDown", [8]error{eU, eU, eU, eU, eA, eA, eU, eA}},
	{"timeout", 0, "", [8]error{eU, eU, eU, eU, eA, eA, eU, eA}},
	// Refused before any byte was sent: nothing can have been applied.
	{"connection refused", 0, "", [8]error{eU, eU, eU, eU, eU, eU, eU, eU}},
}

// Kinds is every kind of error the table names.
var Kinds = []error{eP, eC, eN, eA, eU, eX, eD, eB}
