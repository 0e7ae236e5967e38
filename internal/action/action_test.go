package action

import (
	"bytes"
	"testing"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for name, r := range map[string]Result{
		"json":         {Status: 201, Body: []byte(" {\"a\" : 1}\n")},
		"empty":        {Body: []byte{}},
		"binary":       {Status: 200, ContentType: "application/octet-stream", Body: []byte{0, 0xff, 0xfe}},
		"falsy":        {Body: []byte("0")},
		"default 200":  {Body: []byte("null")},
		"unicode text": {ContentType: "text/plain", Body: []byte("héllo \u2028")},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Decode(Encode(r))
			if err != nil {
				t.Fatal(err)
			}
			want := r.Status
			if want == 0 {
				want = 200
			}
			if got.Status != want || got.ContentType != r.ContentType || !bytes.Equal(got.Body, r.Body) || got.Body == nil {
				t.Errorf("round trip of %+v gave %+v", r, got)
			}
		})
	}
	if _, err := Decode([]byte("not an envelope")); err == nil {
		t.Errorf("Decode accepted garbage")
	}
}
