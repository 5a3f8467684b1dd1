package flows_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nqd-dev/nqd/flows"
)

func TestValidateCompilesWhere(t *testing.T) {
	const def = `{"entry":"a","steps":{"a":{"queue":"q","await":{"type":"event","eventKind":"order.paid","where":%q}}}}`
	if _, err := flows.Parse([]byte(strings.Replace(def, "%q", `"event.data.orderId == input.orderId"`, 1)), false, "f"); err != nil {
		t.Fatalf("valid condition refused: %v", err)
	}
	_, err := flows.Parse([]byte(strings.Replace(def, "%q", `"event.data.orderId =="`, 1)), false, "f")
	var ve *flows.ValidationError
	if !errors.As(err, &ve) || ve.Fields["steps.a.await.where"] == "" {
		t.Fatalf("got %v, want a ValidationError naming steps.a.await.where", err)
	}
}
