package sample

import (
	"context"
	"net/http/httptest"
	"testing"
)

func TestPure(t *testing.T) {
	ctx, cancel := withBudget(context.Background())
	defer cancel()
	_ = ctx
}

func TestServer(t *testing.T) { startServer(t) }

func startServer(t *testing.T) {
	t.Helper()
	s := httptest.NewServer(nil)
	t.Cleanup(s.Close)
}

func TestPollsThroughAMethod(t *testing.T) { poller{}.poll() }

func TestDeadlineInTheTest(t *testing.T) {
	_, cancel := context.WithTimeout(context.Background(), 1)
	cancel()
}

func Testlowercase(t *testing.T) { startServer(t) }

func TestMain(m *testing.M) { m.Run() }
