package memstore_test

import (
	"testing"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/memstore"
	"github.com/oncely/oncely/internal/testing/storetest"
)

func TestConformance(t *testing.T) {
	storetest.RunStoreTests(t, storetest.Harness{NewStore: func(*testing.T) idem.Store { return memstore.New() }})
}

func TestOperator(t *testing.T) {
	storetest.RunOperatorTests(t, func(*testing.T) storetest.OperatorStore { return memstore.New() })
}

func TestPoisonNotes(t *testing.T) {
	s := memstore.New()
	storetest.RunPoisonTests(t, s)
	if n := len(s.Poisons()); n != 1 {
		t.Errorf("%d poison notes after recording one note twice; want 1", n)
	}
}
