package inbound

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// ProofAttribute is the SQS message attribute (a String) that proves an
// envelope came from the receiving route: the route sets it on every
// envelope it queues, and the queue path accepts an envelope only with a
// proof it can check (or, until the cutover, one queued before it; see
// docs/inbound-webhooks.md). It is an attribute, not a member of the
// envelope, so a queue function that predates it reads the envelope as it
// always did.
const ProofAttribute = "oncely-proof"

// proofVersion prefixes each proof; proofDomain is MACed before the body,
// so a proof key's MAC can never be taken for another use of the key.
const (
	proofVersion = "v1,"
	proofDomain  = "oncely-inbound-envelope.v1\x00"
)

// Prove returns the ProofAttribute value for msg, the queue message's exact
// body: "v1,<base64 HMAC-SHA256>" for each key, space-separated, keys[0]
// first. The route proves with every live version of the proof secret
// (current, pending, previous), so a queue function that holds any one of
// them accepts the envelope, whichever side of a rotation each is on.
func Prove(keys [][]byte, msg []byte) string {
	proofs := make([]string, 0, len(keys))
	for _, k := range keys {
		proofs = append(proofs, proofVersion+base64.StdEncoding.EncodeToString(proofMAC(k, msg)))
	}
	return strings.Join(proofs, " ")
}

// CheckProof reports whether proof (a ProofAttribute value) holds a v1
// proof of msg's exact bytes made with one of keys. Any change of msg, a
// proof made with another key, an empty or unreadable proof: false. Each
// comparison is in constant time.
func CheckProof(keys [][]byte, msg []byte, proof string) bool {
	// At most one proof per live stage is sent; a longer list is not ours,
	// and is not worth a MAC of up to 1 MiB per entry.
	fields := strings.Fields(proof)
	if len(fields) == 0 || len(fields) > 3 {
		return false
	}
	for _, k := range keys {
		want := proofMAC(k, msg)
		for _, f := range fields {
			b64, ok := strings.CutPrefix(f, proofVersion)
			if !ok {
				continue
			}
			got, err := base64.StdEncoding.DecodeString(b64)
			if err == nil && hmac.Equal(got, want) {
				return true
			}
		}
	}
	return false
}

func proofMAC(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(proofDomain))
	m.Write(msg)
	return m.Sum(nil)
}
