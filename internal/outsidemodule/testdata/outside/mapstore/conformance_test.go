package mapstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"example.com/outside/mapstore"
	"github.com/oncely/oncely/driver"
	"github.com/oncely/oncely/storetest"
)

// The store written outside oncely passes oncely's conformance suite, every
// capability declared.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		NewStore:  func(*testing.T) driver.Store { return mapstore.New() },
		NewFaulty: func(_ *testing.T, f storetest.Fault) (driver.Store, string) { return faulty{f}, faultyTable },
		Poison:    func(*testing.T) driver.PoisonStore { return mapstore.New() },
		Effects: func(*testing.T) storetest.EffectHarness {
			s := mapstore.New()
			return storetest.EffectHarness{
				Store: s,
				Write: func(_ *testing.T, name string) driver.Effects {
					return mapstore.Writes{{Item: name, Value: "v", If: mapstore.IfAbsent}}
				},
				Exists: func(_ *testing.T, name string) bool { _, ok := s.Item(name); return ok },
				Conflict: func(_ *testing.T, name string) driver.Effects {
					return mapstore.Writes{{Item: name, If: mapstore.IfAbsent}, {Item: name + "-missing", If: mapstore.IfExists}}
				},
				TooMany: func(_ *testing.T, prefix string) driver.Effects {
					var w mapstore.Writes
					for i := range mapstore.MaxWrites + 1 {
						w = append(w, mapstore.Put{Item: fmt.Sprintf("%s-%d", prefix, i)})
					}
					return w
				},
				Twice: func(_ *testing.T, name string) driver.Effects {
					return mapstore.Writes{{Item: name}, {Item: name}}
				},
			}
		},
	})
}

const faultyTable = "outside-records"

// faulty is the store as it would behave if its database failed in the
// way f names: every call fails, classified as the contract says.
type faulty struct{ f storetest.Fault }

func (s faulty) err(write bool) error {
	switch s.f {
	case storetest.MissingTable:
		return driver.PermanentCode(driver.CodeStoreMisconfigured, fmt.Errorf("mapstore: table %s does not exist", faultyTable))
	case storetest.AccessDenied:
		return driver.PermanentCode(driver.CodeStoreMisconfigured, fmt.Errorf("mapstore: access to table %s denied", faultyTable))
	case storetest.DropReply:
		if write {
			return driver.OutcomeUnknown(errors.New("mapstore: the write was sent and no reply came"))
		}
	}
	return driver.Transient(fmt.Errorf("mapstore: %s", s.f))
}

func (s faulty) Reserve(context.Context, driver.Reservation) (driver.Record, bool, error) {
	return driver.Record{}, false, s.err(true)
}
func (s faulty) TakeOver(context.Context, driver.Record, driver.Reservation) (driver.Record, bool, error) {
	return driver.Record{}, false, s.err(true)
}
func (s faulty) Complete(context.Context, driver.Finish) error { return s.err(true) }
func (s faulty) Fail(context.Context, driver.Finish) error     { return s.err(true) }
func (s faulty) Get(context.Context, string, time.Time) (driver.Record, bool, error) {
	return driver.Record{}, false, s.err(false)
}
