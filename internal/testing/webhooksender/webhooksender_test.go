package webhooksender

import (
	"testing"
	"time"
)

func TestGitHubSignsItsPublishedTestVector(t *testing.T) {
	v := GitHubTestVector
	if got := GitHub(v.Secret, []byte(v.Payload)); got != v.Signature {
		t.Errorf("GitHub(test vector) got %s, want %s", got, v.Signature)
	}
}

func TestStripeHeaderShape(t *testing.T) {
	got := Stripe(time.Unix(1700000000, 0), []byte(`{"id":"evt_1"}`), "whsec_a", "whsec_b")
	// Two v1 signatures during a rotation, after the timestamp; the values
	// themselves are checked by PyPI's stripe in internal/e2e.
	if len(got) != len("t=1700000000")+2*len(",v1=")+2*64 || got[:13] != "t=1700000000," {
		t.Errorf("Stripe header got %q, want t=1700000000,v1=<64 hex>,v1=<64 hex>", got)
	}
}
