package bucket

// A Quirk is one way a real store departs from the plain reading of the S3
// conditional-write API that deed relies on.
//
// They live in one table, not as special cases scattered through the code,
// for two reasons: the table is the checklist a new store is held against
// (the probe reports by quirk ID), and Classify consults it, so adding a
// store's oddity is one row here plus one line in the contract tests. Only
// quirks the code actually handles belong here; a behaviour deed cannot
// tolerate is a contract failure, not a quirk.
type Quirk struct {
	// ID is a stable short name, used in logs, the probe report and tests.
	ID string
	// Seen says which stores show the behaviour, as far as deed has tested.
	Seen string
	// Behaviour is what the store does.
	Behaviour string
	// Handling is what deed does about it.
	Handling string

	// The fields below make the quirk a classification rule: a response
	// matching Op, Cond, Status and Code means Kind. Status 0 means the quirk
	// is not about classification (it is handled elsewhere, as Handling says).

	// Op is "put", "delete", "get", "head", "list", "write" (put or
	// delete), or "" for any operation.
	Op string
	// Conds are the conditions the request must have carried; nil means any
	// (including none).
	Conds []CondKind
	// Status is the HTTP status the store answers.
	Status int
	// Code is the S3 error code; "" matches any code.
	Code string
	// Kind is the typed error the response stands for.
	Kind error
}

// The quirk IDs, for code and tests that refer to one row.
const (
	QuirkETagQuoting         = "etag-quoting"
	QuirkIfMatchMissing404   = "if-match-missing-404"
	QuirkConditionalConflict = "conditional-conflict-409"
	QuirkConflictAnyCode     = "conditional-409-any-code"
	QuirkNotImplemented      = "not-implemented-501"
	QuirkDeleteMissingOK     = "if-match-delete-missing-ok"
	QuirkParentIsFile        = "posix-parent-is-file-409"
	QuirkObjectIsDirectory   = "posix-object-is-directory-409"
	QuirkAzureCreateExists   = "azure-create-exists-409"
	QuirkGCSGenerationETag   = "gcs-generation-etag"
	QuirkSDKRetriesWrites    = "sdk-retries-conditional-writes"
	QuirkAzureDeleteMissing  = "azure-if-match-delete-missing-412"
	QuirkAzureStartFrom      = "azure-list-start-from"
	QuirkDeleteIgnoresMatch  = "fakegcs-delete-ignores-precondition"
	QuirkDelimiterPaging     = "fakegcs-delimiter-paging"
)

var conditional = []CondKind{CondIfAbsent, CondIfMatch}

// Quirks is the table. Order matters only among rows that match the same
// response: the first match wins.
var Quirks = []Quirk{
	{
		ID: QuirkETagQuoting,
		Seen: "AWS S3 returns quoted ETags; so do fakes3.Server, fakes3.Mem and versitygw " +
			"v1.8.0, which also accept a bare If-Match (contract test etag-quoting); the " +
			"field reports name stores that return or expect bare hex",
		Behaviour: "an ETag may come back quoted (\"abc\") or bare (abc), and a store may " +
			"compare If-Match byte-for-byte",
		Handling: "the S3 client sends If-Match exactly as the store returned the ETag (never " +
			"re-quoted or stripped); deed compares ETags only with SameETag, which ignores quotes " +
			"and a W/ prefix; fakes3.Server compares If-Match quote-insensitively",
	},
	{
		ID: QuirkIfMatchMissing404,
		Seen: "AWS S3, versitygw v1.8.0, fakes3.Server and fakes3.Mem answer 404 NoSuchKey; " +
			"bare gofakes3 answers 412",
		Behaviour: "a PUT with If-Match on a key that does not exist fails with 404 NoSuchKey " +
			"instead of 412",
		Handling: "a 404 on a put with If-Match means the version we expected is gone, which is " +
			"what 412 means: ErrPrecondition. (A DELETE with If-Match on a missing key stays " +
			"ErrNotFound: the contract reports that case distinctly.)",
		Op:     "put",
		Conds:  []CondKind{CondIfMatch},
		Status: 404,
		Kind:   ErrPrecondition,
	},
	{
		ID:   QuirkConditionalConflict,
		Seen: "AWS S3",
		Behaviour: "409 ConditionalRequestConflict when another conditional write to the same " +
			"key is in flight",
		Handling: "ErrConflict: nothing was written; back off, re-read and decide again",
		Status:   409,
		Code:     "ConditionalRequestConflict",
		Kind:     ErrConflict,
	},
	{
		// Before QuirkConflictAnyCode: the blob exists, which is a lost
		// create, not a race to retry.
		ID:   QuirkAzureCreateExists,
		Seen: "Azure Blob Storage (documented for Put Blob) and Azurite 3.35.0",
		Behaviour: "a Put Blob with If-None-Match: * on a blob that exists fails with 409 " +
			"BlobAlreadyExists, not 412",
		Handling: "ErrPrecondition, as a 412 on S3: the key exists and nothing was written",
		Op:       "put",
		Conds:    []CondKind{CondIfAbsent},
		Status:   409,
		Code:     "BlobAlreadyExists",
		Kind:     ErrPrecondition,
	},
	{
		// Before QuirkConflictAnyCode: these 409s are permanent, and
		// reading them as a race would have callers retry forever.
		ID:   QuirkParentIsFile,
		Seen: "versitygw v1.8.0 (posix backend)",
		Behaviour: "keys map to files and directories, so a key cannot be stored below another " +
			"key (x/y when x exists): 409 ObjectParentIsFile, on any PUT",
		Handling: "ErrUnsupported: a definite refusal of this key layout, not a race, so " +
			"retrying cannot help; deed's own layout never nests a key below another key",
		Status: 409,
		Code:   "ObjectParentIsFile",
		Kind:   ErrUnsupported,
	},
	{
		ID:   QuirkObjectIsDirectory,
		Seen: "versitygw v1.8.0 (posix backend)",
		Behaviour: "the converse of posix-parent-is-file-409: a key cannot be stored where " +
			"other keys sit below it (x when x/y exists): 409 ExistingObjectIsDirectory",
		Handling: "ErrUnsupported, as for posix-parent-is-file-409",
		Status:   409,
		Code:     "ExistingObjectIsDirectory",
		Kind:     ErrUnsupported,
	},
	{
		ID: QuirkConflictAnyCode,
		Seen: "AWS S3 documents 409 OperationAborted (\"a conflicting conditional operation " +
			"is currently in progress\"); other stores use other codes",
		Behaviour: "a 409 with another error code on a conditional write, meaning a concurrent " +
			"operation won",
		Handling: "ErrConflict like ConditionalRequestConflict: a 409 is a refusal, never a " +
			"write that landed",
		Op:     "write",
		Conds:  conditional,
		Status: 409,
		Kind:   ErrConflict,
	},
	{
		ID: QuirkNotImplemented,
		Seen: "stores that predate conditional DELETE; none of those tested here (versitygw " +
			"v1.8.0 and gofakes3 behind fakes3.Server both implement it)",
		Behaviour: "501 NotImplemented for a request with a header the store does not support, " +
			"typically If-Match on DELETE",
		Handling: "ErrUnsupported: the request was refused, nothing changed; the probe reports " +
			"conditional DELETE as a warning, and deed never depends on it for safety",
		Status: 501,
		Kind:   ErrUnsupported,
	},
	{
		ID: QuirkGCSGenerationETag,
		Seen: "Google Cloud Storage and fake-gcs-server: their write preconditions take a " +
			"generation number (ifGenerationMatch), not an ETag",
		Behaviour: "a version is named by its generation; create-only is ifGenerationMatch=0",
		Handling: "bucket/gcs hands out the generation as a decimal string wherever deed expects " +
			"an ETag (Put, Get, Head, List) and sends it back as ifGenerationMatch; an If-Match " +
			"value that is no generation names no version the bucket can hold, so it is " +
			"ErrPrecondition without a request",
	},
	{
		ID: QuirkSDKRetriesWrites,
		Seen: "aws-sdk-go-v2, cloud.google.com/go/storage (it counts a write with a generation " +
			"precondition as idempotent) and the Azure SDK (retries every failed request) all " +
			"retry by default",
		Behaviour: "a retried conditional write whose first attempt landed collides with its own " +
			"result and reports a false 412",
		Handling: "each adapter sends conditional writes once, with the SDK's retries off, under " +
			"a timeout (DefaultWriteTimeout), and reports a failure without an answer as " +
			"ErrAmbiguous; reads and unconditional writes keep the SDK's retries",
	},
	{
		ID:   QuirkAzureDeleteMissing,
		Seen: "Azurite 3.35.0",
		Behaviour: "a Delete Blob with If-Match on a blob that does not exist fails with 412 " +
			"ConditionNotMet, the answer for a blob with another ETag",
		Handling: "bucket/azblob reads the key after a 412 on a conditional delete: no blob " +
			"means ErrNotFound, as the contract reports a missing key; otherwise ErrPrecondition. " +
			"Nothing was deleted either way",
	},
	{
		ID:   QuirkAzureStartFrom,
		Seen: "Azurite 3.35.0 ignores startFrom; Azure documents it as inclusive",
		Behaviour: "List Blobs has no start-after; its startFrom, where honoured, includes the key " +
			"itself",
		Handling: "bucket/azblob drops every entry up to and including StartAfter itself, and " +
			"carries the bound in its page token so later pages are filtered too; on a store " +
			"that ignores startFrom a start-after listing reads from the start of the prefix",
	},
	{
		ID:   QuirkDeleteIgnoresMatch,
		Seen: "fake-gcs-server v1.56.1 (emulator only: GCS honours ifGenerationMatch on delete)",
		Behaviour: "a delete with ifGenerationMatch deletes the object whatever its generation: " +
			"the precondition is ignored",
		Handling: "none possible in the adapter; the contract test asserts the deviation and the " +
			"probe fails its conditional-delete check there. deed's safety never rests on a " +
			"conditional delete; runs on fake-gcs-server must not be read as proving one",
	},
	{
		ID:   QuirkDelimiterPaging,
		Seen: "fake-gcs-server v1.56.1 (emulator only)",
		Behaviour: "a listing with a delimiter pages objects only: every page carries all the " +
			"common prefixes at or after its start, past maxResults, so a paged listing repeats them",
		Handling: "none in the adapter; the contract test asserts the deviation. deed's own " +
			"delimiter listings (cells, a cell's epochs) hold prefixes only, which the emulator " +
			"returns whole on one page",
	},
	{
		ID:   QuirkDeleteMissingOK,
		Seen: "versitygw v1.8.0",
		Behaviour: "a DELETE with If-Match on a key that does not exist succeeds (204) " +
			"instead of failing with 404 NoSuchKey; a key that exists with another ETag " +
			"is still refused with 412",
		Handling: "nothing to reclassify (a 204 carries no error): Bucket.Delete documents " +
			"that nil and ErrNotFound from a conditional delete both mean the named version " +
			"is gone, so callers must not tell them apart; the contract tests assert nil on " +
			"the stores listed here",
	},
}

// QuirkByID returns the row with this ID.
func QuirkByID(id string) (Quirk, bool) {
	for _, q := range Quirks {
		if q.ID == id {
			return q, true
		}
	}
	return Quirk{}, false
}

// matchQuirk returns the first classification rule matching a response.
func matchQuirk(op string, cond Condition, status int, code string) (Quirk, bool) {
	for _, q := range Quirks {
		if q.Status == 0 || q.Status != status {
			continue
		}
		if !opMatches(q.Op, op) {
			continue
		}
		if q.Code != "" && q.Code != code {
			continue
		}
		if q.Conds != nil && !hasCond(q.Conds, cond.Kind) {
			continue
		}
		return q, true
	}
	return Quirk{}, false
}

func opMatches(want, op string) bool {
	switch want {
	case "":
		return true
	case "write":
		return op == "put" || op == "delete"
	default:
		return want == op
	}
}

func hasCond(ks []CondKind, k CondKind) bool {
	for _, x := range ks {
		if x == k {
			return true
		}
	}
	return false
}
