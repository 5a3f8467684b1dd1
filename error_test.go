package nqd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nqd-dev/nqd"
)

func TestErrorCodeAndMessage(t *testing.T) {
	sentinel := &nqd.Error{Code: nqd.CodeNotFound, Message: "The resource does not exist."}
	refined := nqd.Refine(sentinel, "No flow %q.", "f1")
	tests := []struct {
		name          string
		err           error
		code, message string
	}{
		{"nil", nil, "", ""},
		{"an Error", sentinel, nqd.CodeNotFound, "The resource does not exist."},
		{"wrapped", fmt.Errorf("boltstore: flow f1: %w", sentinel), nqd.CodeNotFound, "The resource does not exist."},
		{"refined, then wrapped", fmt.Errorf("engine: %w", refined), nqd.CodeNotFound, `No flow "f1".`},
		{"the outermost Error wins", fmt.Errorf("%w: %w", nqd.Errorf(nqd.CodeConflict, "Taken."), sentinel), nqd.CodeConflict, "Taken."},
		{"deadline", fmt.Errorf("read: %w", context.DeadlineExceeded), nqd.CodeTimeout, "The request took too long."},
		{"canceled", fmt.Errorf("read: %w", context.Canceled), nqd.CodeCanceled, "The request was canceled."},
		{"anything else keeps its text to itself", errors.New("dial tcp 10.0.0.7:6379: refused"), nqd.CodeInternal, "Internal error."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nqd.ErrorCode(tt.err); got != tt.code {
				t.Errorf("ErrorCode = %q, want %q", got, tt.code)
			}
			if got := nqd.ErrorMessage(tt.err); got != tt.message {
				t.Errorf("ErrorMessage = %q, want %q", got, tt.message)
			}
		})
	}
	if !errors.Is(refined, sentinel) {
		t.Error("a refined error is not the error it refines")
	}
}
