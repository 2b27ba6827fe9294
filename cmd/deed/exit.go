package main

import "github.com/deedkit/deed/errcode"

// codeExitStatus is the process exit status for a code: 0 ok, 1 error, 2 bad
// input, 3 fenced, 4 held / not holder, 5 store fails the contract, 6 a
// conditional append's position was taken. It is a
// function of the code alone, so that scripts can branch on the status
// without parsing messages.
func codeExitStatus(c errcode.Code) int {
	switch c {
	case "":
		return 0
	case errcode.CodeInvalidName, errcode.CodeInvalidLease, errcode.CodeBadRequest, errcode.CodeUnauthorized, errcode.CodeCrossSite, errcode.CodeKeyReused:
		return 2
	case errcode.CodeSuperseded, errcode.CodeReleased, errcode.CodeNodeFenced:
		return 3
	case errcode.CodeHeld, errcode.CodeNotHolder:
		return 4
	case errcode.CodeContract:
		return 5
	case errcode.CodePosMismatch:
		return 6
	default:
		return 1
	}
}
