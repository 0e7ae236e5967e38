package action

import (
	"bytes"
	"testing"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for name, r := range map[string]Result{
		"json, spaced":    {Status: 201, Body: []byte(" {\"a\" : 1}\n")},
		"empty":           {Body: []byte{}},
		"binary":          {Status: 200, ContentType: "application/octet-stream", Body: []byte{0, 0xff, 0xfe}},
		"falsy":           {Body: []byte("0")},
		"default 200":     {Body: []byte("null")},
		"unicode text":    {ContentType: "text/plain", Body: []byte("héllo \u2028")},
		"json":            {Body: []byte(`{"a":[1,2.50,"<&>"],"b":"\u00e9"}`)},
		"json, not UTF-8": {Body: []byte("{\"a\":\"\xff\"}")},
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

// A JSON body is stored once, verbatim: no second encoding of it as a
// string, and no HTML escaping (each would grow the record, and a record
// over 1 KB costs DynamoDB two write units).
func TestEncodeKeepsJSONBodiesVerbatim(t *testing.T) {
	body := []byte(`{"delivered":true,"downstream_status":200,"reply":"<p class=\"x\">a & b</p>"}`)
	got := Encode(Result{Body: body})
	want := `{"status":200,"json":` + string(body) + `}`
	if string(got) != want {
		t.Errorf("Encode = %s\nwant     %s", got, want)
	}
	got = Encode(Result{Status: 201, ContentType: "text/html", Body: []byte(`<p>"&"</p>`)})
	if want := `{"status":201,"content_type":"text/html","body":"<p>\"&\"</p>"}`; string(got) != want {
		t.Errorf("Encode(text) = %s\nwant            %s", got, want)
	}
	// Bytes a JSON decoder would not hand back as they are stay strings.
	for _, b := range []string{" {}", "{}\n", `{"a":1`, ""} {
		if got := Encode(Result{Body: []byte(b)}); bytes.Contains(got, []byte(`"json"`)) {
			t.Errorf("Encode(%q) = %s; want it kept as a string", b, got)
		}
	}
}

// Records written before the "json" form existed (every UTF-8 body as an
// HTML-escaped string) replay byte for byte.
func TestDecodeReadsTheFormatWrittenBeforeTheJSONForm(t *testing.T) {
	for name, tt := range map[string]struct{ stored, body, contentType string }{
		// What notify's summary of an HTML reply became: encoded twice, with HTML escapes.
		"notify summary": {
			stored: `{"status":200,"body":"{\"delivered\":true,\"downstream_status\":202,\"reply\":\"\\u003chtml\\u003e\\u0026\\u003c/html\\u003e\"}"}`,
			body:   `{"delivered":true,"downstream_status":202,"reply":"\u003chtml\u003e\u0026\u003c/html\u003e"}`,
		},
		"ledger entry": {stored: `{"status":201,"body":"{\"entry\":\"evt:a:ledger\"}"}`, body: `{"entry":"evt:a:ledger"}`},
		"text":         {stored: `{"status":200,"content_type":"text/plain","body":"a \u003c b"}`, body: "a < b", contentType: "text/plain"},
		"binary":       {stored: `{"status":200,"body_base64":"AP8="}`, body: "\x00\xff"},
		"empty":        {stored: `{"status":204}`, body: ""},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Decode([]byte(tt.stored))
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Body) != tt.body || got.ContentType != tt.contentType || got.Body == nil {
				t.Errorf("Decode(%s) = %q %q; want body %q, content type %q", tt.stored, got.Body, got.ContentType, tt.body, tt.contentType)
			}
		})
	}
}
