package canonjson

import (
	"errors"
	"testing"
)

func TestAppendCanonicalForms(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"whitespace and key order", " { \"b\" : 1 ,\n\"a\":[ true , false,null ] } ", `{"a":[true,false,null],"b":1}`},
		{"nested objects sorted", `{"z":{"y":1,"x":2},"a":{}}`, `{"a":{},"z":{"x":2,"y":1}}`},
		{"empty containers", `[{},[],""]`, `[{},[],""]`},
		// RFC 8785 §3.2.3's sorting example: UTF-16 code-unit order puts the
		// emoji (U+1F600, D83D DE00) before U+FB33.
		{"rfc8785 sort by utf16 units",
			`{"\u20ac":"Euro","\r":"CR","\ufb33":"Dalet","1":"One","\ud83d\ude00":"Emoji","\u0080":"Control","\u00f6":"o"}`,
			"{\"\\r\":\"CR\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"o\",\"€\":\"Euro\",\"😀\":\"Emoji\",\"\ufb33\":\"Dalet\"}"},
		{"string escapes minimal", `"\u0041\/\u001f\b\f\n\r\t\"\\<>\u2028"`, "\"A/\\u001f\\b\\f\\n\\r\\t\\\"\\\\<>\u2028\""},
		{"integers kept exact beyond 2^53", `[9007199254740993,12345678901234567891,-0,0,-12]`, `[9007199254740993,12345678901234567891,0,0,-12]`},
		// RFC 8785 Appendix B number samples.
		{"es6 numbers", `[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001,-0.0,1e21,1e20,1.0,1e2,-1.5e300,5e-324,0.1,123e-8]`,
			`[333333333.3333333,1e+30,4.5,0.002,1e-27,0,1e+21,100000000000000000000,1,100,-1.5e+300,5e-324,0.1,0.00000123]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Append(nil, []byte(tt.in))
			if err != nil {
				t.Fatalf("Append(%s): %v", tt.in, err)
			}
			if string(got) != tt.want {
				t.Errorf("Append(%s)\n got %s\nwant %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestAppendRejectsInvalid(t *testing.T) {
	tests := []struct{ name, in string }{
		{"syntax", `{"a":}`},
		{"trailing garbage", `{} {}`},
		{"duplicate member", `{"a":1,"a":2}`},
		{"duplicate after escape", `{"a":1,"\u0061":2}`},
		{"lone high surrogate", `"\ud83d"`},
		{"lone low surrogate", `"\ude00x"`},
		{"invalid utf8", "\"\xff\""},
		{"number overflow", `1e400`},
		{"empty", ``},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Append(nil, []byte(tt.in))
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Append(%q) = %q, %v; want an ErrInvalid error", tt.in, got, err)
			}
		})
	}
}

func FuzzAppendIdempotent(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.5,"x"]}`, `[1e30,-0.0]`, `"\u00e9"`,
		// Nesting and number shapes: the deepest accepted, one deeper, and
		// numbers at the edges of the double range and of ES6 formatting.
		nest(MaxDepth, `{"b":-0.0,"a":1e21}`), nest(MaxDepth+1, "0"),
		`[5e-324,1.7976931348623157e308,1e-7,1e-6,123456789012345678901234567890,-0,0.1e1]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		once, err := Append(nil, in)
		if err != nil {
			return
		}
		twice, err := Append(nil, once)
		if err != nil {
			t.Fatalf("canonical output %q does not re-parse: %v", once, err)
		}
		if string(once) != string(twice) {
			t.Fatalf("not idempotent: %q -> %q", once, twice)
		}
	})
}
