package boltstore

import (
	"encoding/json"
	"testing"
)

// TestHeadsReadAsEncodingJSON: the scans of a stored run's and job's head
// read what encoding/json reads, for records as nqd writes them and for the
// shapes the scan leaves to encoding/json.
func TestHeadsReadAsEncodingJSON(t *testing.T) {
	for _, rec := range []string{
		`{"flow":"f","run":"r","status":"running","startedAt":1,"stepCount":1,"completedSteps":0,"version":3,"state":{"a":[1,{"version":9}]}}`,
		`{"status":"completed","version":12}`,
		`{"Version":4,"STATUS":"failed"}`,
		`{"version":5,"\u0073tatus":"waiting"}`,
		`{"status":"a\"b","version":1,"version":2}`,
		`{"status":"x","version":1.0}`,
		`{}`,
	} {
		var want runHead
		wantErr := json.Unmarshal([]byte(rec), &want)
		got, err := runHeadOf([]byte("f:r"), []byte(rec))
		if (err != nil) != (wantErr != nil) || (err == nil && got != want) {
			t.Errorf("runHeadOf(%s) = %+v, %v; want %+v, %v", rec, got, err, want, wantErr)
		}
	}
	if _, err := runHeadOf([]byte("f:r"), []byte(`{"version":`)); err == nil {
		t.Error("runHeadOf of a cut record: no error")
	}

	for _, rec := range []string{
		`{"id":"r:s","queue":"q","flowName":"f","runId":"r","step":"s","input":{"lease":"no","score":1},"attempt":1,"lease":"abc","leaseUntil":9,"score":9}`,
		`{"id":"r:s","queue":"q","attempt":1,"score":-4}`,
		`{"LEASE":"up","Score":7}`,
		`{"lease":"\u0061b","score":2}`,
	} {
		var j storedJob
		if err := json.Unmarshal([]byte(rec), &j); err != nil {
			t.Fatal(err)
		}
		want := jobHead{lease: j.Lease, score: j.Score}
		got, err := headOf("r:s", []byte(rec))
		if err != nil || got != want {
			t.Errorf("headOf(%s) = %+v, %v; want %+v", rec, got, err, want)
		}
	}
}
