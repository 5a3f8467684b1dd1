package engine

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestJobMetaIsTheMapsEncoding: jobMeta writes the bytes json.Marshal
// writes for the map of attempt and job id, for ids that need escaping too.
func TestJobMetaIsTheMapsEncoding(t *testing.T) {
	for _, id := range []string{"01a2195c-ac85-7e95-82ff-bf44dbe:step", "", `q"uote\\`, "<html>&", "tab\there", "ünïcode \u2028"} {
		for _, attempt := range []int{0, 1, 12, -3} {
			want, err := json.Marshal(map[string]any{"attempt": attempt, "jobId": id})
			if err != nil {
				t.Fatal(err)
			}
			if got := jobMeta(attempt, id); !bytes.Equal(got, want) {
				t.Errorf("jobMeta(%d, %q) = %s, want %s", attempt, id, got, want)
			}
		}
	}
}
