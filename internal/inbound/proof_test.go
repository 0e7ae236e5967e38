package inbound_test

import (
	"strings"
	"testing"

	"github.com/oncely/oncely/internal/inbound"
)

// A proof covers the exact bytes, with one of the keys; each live key's
// proof travels, so either side of a rotation checks it.
func TestProof(t *testing.T) {
	cur, prev, other := []byte("proof-key-current-0000000001"), []byte("proof-key-previous-000000001"), []byte("proof-key-other-000000000001")
	msg := []byte(`{"oncely_inbound":1,"source":"acme","scheme":"github","delivery_id":"d","body":{"n":1}}`)
	proof := inbound.Prove([][]byte{cur, prev}, msg)
	if n := len(strings.Fields(proof)); n != 2 || !strings.HasPrefix(proof, "v1,") {
		t.Fatalf("proof %q; want two v1 proofs", proof)
	}
	for _, tt := range []struct {
		name  string
		keys  [][]byte
		msg   []byte
		proof string
		want  bool
	}{
		{"current key", [][]byte{cur}, msg, proof, true},
		{"previous key only", [][]byte{prev}, msg, proof, true},
		{"another key", [][]byte{other}, msg, proof, false},
		{"one byte changed", [][]byte{cur}, []byte(strings.Replace(string(msg), `"n":1`, `"n":2`, 1)), proof, false},
		{"a byte appended", [][]byte{cur}, append(append([]byte{}, msg...), ' '), proof, false},
		{"no proof", [][]byte{cur}, msg, "", false},
		{"not base64", [][]byte{cur}, msg, "v1,@@@", false},
		{"another version", [][]byte{cur}, msg, strings.ReplaceAll(proof, "v1,", "v2,"), false},
		{"more proofs than live stages", [][]byte{cur}, msg, proof + " " + proof, false},
		{"no keys", nil, msg, proof, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := inbound.CheckProof(tt.keys, tt.msg, tt.proof); got != tt.want {
				t.Errorf("CheckProof = %v; want %v", got, tt.want)
			}
		})
	}
}
