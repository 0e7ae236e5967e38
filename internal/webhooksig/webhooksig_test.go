package webhooksig_test

import (
	"strings"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/webhooksig"
)

// The example of the Standard Webhooks specification (and of svix's docs,
// where it comes from): an independent vector.
func TestSpecificationExample(t *testing.T) {
	key, err := webhooksig.DecodeSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	if err != nil {
		t.Fatal(err)
	}
	h := webhooksig.Headers("msg_p5jXN8AQM9LWM0D4loKWxJek", time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`), [][]byte{key})
	want := map[string]string{
		"webhook-id":        "msg_p5jXN8AQM9LWM0D4loKWxJek",
		"webhook-timestamp": "1614265330",
		"webhook-signature": "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("%s = %q; want %q", k, h[k], v)
		}
	}
}

func TestEveryLiveKeySigns(t *testing.T) {
	a, _ := webhooksig.DecodeSecret("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	b, _ := webhooksig.DecodeSecret("whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")
	sig := webhooksig.Headers("evt:a:notify", time.Unix(1, 0), []byte("{}"), [][]byte{a, b})["webhook-signature"]
	parts := strings.Split(sig, " ")
	if len(parts) != 2 || parts[0] != "v1,"+webhooksig.Sign(a, "evt:a:notify", "1", []byte("{}")) || parts[1] != "v1,"+webhooksig.Sign(b, "evt:a:notify", "1", []byte("{}")) {
		t.Errorf("signature header %q; want one v1 signature per key, current first, one space apart", sig)
	}
}

func TestDecodeSecret(t *testing.T) {
	// What CloudFormation's GenerateSecretString gives with 32 characters
	// and no punctuation: valid base64 for a 24-byte key.
	generated := "Xk3p9QwZt7VbN2mR8sLcY4hJ6dFgA1eU"
	for _, s := range []string{generated, "whsec_" + generated, " " + generated + "\n"} {
		if key, err := webhooksig.DecodeSecret(s); err != nil || len(key) != 24 {
			t.Errorf("DecodeSecret(%q) = %d bytes, %v; want a 24-byte key", s, len(key), err)
		}
	}
	for _, s := range []string{"not base64 !!", "c2hvcnQ=", ""} {
		_, err := webhooksig.DecodeSecret(s)
		if err == nil || (s != "" && strings.Contains(err.Error(), s)) {
			t.Errorf("DecodeSecret(%q) = %v; want an error that does not repeat the secret", s, err)
		}
	}
}
