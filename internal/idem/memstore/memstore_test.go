package memstore_test

import (
	"testing"

	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/idem/idemtest"
	"github.com/oncely/oncely/internal/idem/memstore"
)

func TestConformance(t *testing.T) {
	idemtest.RunStoreTests(t, func(*testing.T) idem.Store { return memstore.New() })
}

func TestPoisonNotes(t *testing.T) {
	s := memstore.New()
	idemtest.RunPoisonTests(t, s)
	if n := len(s.Poisons()); n != 1 {
		t.Errorf("%d poison notes after recording one note twice; want 1", n)
	}
}
