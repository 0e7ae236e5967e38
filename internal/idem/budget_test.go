package idem_test

import (
	"context"
	"testing"
	"time"

	"github.com/oncely/oncely/internal/idem"
)

func TestBudget(t *testing.T) {
	d := time.Date(2026, 12, 1, 12, 0, 30, 0, time.UTC)
	b := idem.Budget{StoreReserve: 400 * time.Millisecond, RespondReserve: 200 * time.Millisecond, MinWork: 100 * time.Millisecond}
	if got, want := b.StoreDeadline(d), d.Add(-200*time.Millisecond); !got.Equal(want) {
		t.Errorf("StoreDeadline = %v; want %v", got, want)
	}
	if got, want := b.WorkDeadline(d, d), d.Add(-600*time.Millisecond); !got.Equal(want) {
		t.Errorf("WorkDeadline(lease = deadline) = %v; want %v", got, want)
	}
	lease := d.Add(-10 * time.Second)
	if got, want := b.WorkDeadline(lease, d), lease.Add(-400*time.Millisecond); !got.Equal(want) {
		t.Errorf("WorkDeadline(shorter lease) = %v; want %v (the write must land within the lease)", got, want)
	}
	if got, want := b.WorkDeadline(lease, time.Time{}), lease.Add(-400*time.Millisecond); !got.Equal(want) {
		t.Errorf("WorkDeadline(no deadline) = %v; want %v", got, want)
	}
	if got, want := b.CallDeadline(d), d.Add(-50*time.Millisecond); !got.Equal(want) {
		t.Errorf("CallDeadline = %v; want %v", got, want)
	}
	work := d.Add(-time.Second)
	if !b.CanStart(work.Add(-100*time.Millisecond), work) || b.CanStart(work.Add(-99*time.Millisecond), work) {
		t.Errorf("CanStart: want true with exactly MinWork left, false with less")
	}
	if got := b.WorkTime(3 * time.Second); got != 2400*time.Millisecond {
		t.Errorf("WorkTime(3s) = %v; want 2.4s", got)
	}
	if got := (idem.Budget{}).Reserve(); got != idem.DefaultStoreReserve+idem.DefaultRespondReserve {
		t.Errorf("zero Budget's Reserve = %v; want the defaults' sum", got)
	}
	ctx, cancel := context.WithDeadline(context.Background(), d)
	defer cancel()
	sctx, scancel := b.StoreContext(ctx)
	defer scancel()
	if got, _ := sctx.Deadline(); !got.Equal(b.StoreDeadline(d)) {
		t.Errorf("StoreContext deadline = %v; want %v", got, b.StoreDeadline(d))
	}
	free, fcancel := b.StoreContext(context.Background())
	defer fcancel()
	if _, ok := free.Deadline(); ok {
		t.Errorf("StoreContext of a ctx without deadline has one")
	}
}
