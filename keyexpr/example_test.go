package keyexpr_test

import (
	"fmt"

	"github.com/oncely/oncely/keyexpr"
)

// A configuration-driven function keys its events on an order id and an
// action, and fingerprints only the order: the delivery's timestamp may
// differ between copies of one event.
func Example() {
	x, err := keyexpr.New("['order', detail.id, detail.action]", "detail")
	if err != nil {
		panic(err)
	}
	a, _ := x.Request([]byte(`{"time":"10:00","detail":{"id":"o-1","action":"ship"}}`))
	b, _ := x.Request([]byte(`{"time":"10:05","detail":{"action":"ship","id":"o-1"}}`))
	fmt.Println(a.Key, a.Fingerprint == b.Fingerprint)

	_, err = x.Request([]byte(`{"detail":{"id":{"nested":true},"action":"ship"}}`))
	fmt.Println(err)
	// Output:
	// order:o-1:ship true
	// KEY_MISSING: key part #2 is an object; want a string
}
