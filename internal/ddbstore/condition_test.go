package ddbstore

import (
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/go-cmp/cmp"

	"github.com/oncely/oncely/internal/idem"
)

// TestConditionAndLeavesItsBaseAlone pins that and builds a new condition
// without writing into the one it extends, nor into the shared name maps:
// two rules added to one compare-and-swap (as Release's two branches do)
// must not see each other's values, and conditions built at once in
// concurrent invocations (Lambda Managed Instances) must not race (run
// with -race).
func TestConditionAndLeavesItsBaseAlone(t *testing.T) {
	now := time.Unix(1_900_000_000, 0)
	base := swapOn(idem.Record{Token: "tok", Status: idem.StatusFailed, Attempts: 2}, now)
	baseValues, baseNames, sharedNames := maps.Clone(base.values), maps.Clone(base.names), maps.Clone(swapNames)
	var wg sync.WaitGroup
	got := make([]condition, 8)
	for i := range got {
		wg.Go(func() {
			if i%2 == 0 {
				got[i] = base.and("#lease_until <= :now_ms", swapLeaseNames, map[string]types.AttributeValue{":now_ms": ms(now)})
			} else {
				got[i] = base.and("#status = :failed", swapNames, map[string]types.AttributeValue{":failed": str("FAILED")})
			}
		})
	}
	wg.Wait()
	eq := cmp.Comparer(func(a, b types.AttributeValue) bool {
		return cmp.Equal(a, b, cmp.AllowUnexported(types.AttributeValueMemberS{}, types.AttributeValueMemberN{}))
	})
	if diff := cmp.Diff(baseValues, base.values, eq); diff != "" {
		t.Errorf("and wrote into its base's values (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(baseNames, base.names); diff != "" {
		t.Errorf("and wrote into its base's names (-before +after):\n%s", diff)
	}
	if diff := cmp.Diff(sharedNames, swapNames); diff != "" {
		t.Errorf("and wrote into the shared swapNames (-before +after):\n%s", diff)
	}
	for i, c := range got {
		_, hasNow := c.values[":now_ms"]
		_, hasFailed := c.values[":failed"]
		if hasNow == hasFailed || len(c.values) != len(baseValues)+1 {
			t.Errorf("condition %d (%s) has values %v; want the base's and its own rule's only", i, c.expr, slices.Sorted(maps.Keys(c.values)))
		}
	}
}
