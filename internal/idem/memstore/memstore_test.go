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
