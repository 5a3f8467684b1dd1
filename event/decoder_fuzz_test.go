package event

import (
	"reflect"
	"testing"
)

// FuzzDecoder checks that a Decoder reads every body as UnmarshalJSON does,
// the second of two bodies in a row included, whose strings it may share
// with the first.
func FuzzDecoder(f *testing.F) {
	for _, s := range [][2]string{
		{`{"kind":"log","subject":"r","flow":"r","step":"s","data":{"msg":"m"}}`, `{"kind":"log","subject":"r","flow":"r","step":"s","attempt":2,"meta":{"attempt":2}}`},
		{`{"type":"a\\nb","runId":"x","stepName":"y","data":null}`, `{"kind":"a\nb","flow":null,"runId":"x"}`},
		{`{"id":"1-2","ts":"t","Kind":"k"}`, `{"id":"x"}`},
		{`{"kind":5,"kind":"a"}`, `{"attempt":1.5}`},
		{`{"subject":"\u00e9","trigger":"t","correlationId":"c"}`, `{"subject":"é","flowName":"f"} `},
	} {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		var d Decoder
		for _, body := range [][]byte{a, b} {
			got, gotErr := d.Decode(ID{1, 2}, body)
			var want Event
			wantErr := want.UnmarshalJSON(body)
			if wantErr != nil {
				want = Event{}
			} else {
				want.ID = ID{1, 2}
			}
			if (gotErr != nil) != (wantErr != nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("Decode(%q) = %+v, %v; UnmarshalJSON gives %+v, %v", body, got, gotErr, want, wantErr)
			}
		}
	})
}
