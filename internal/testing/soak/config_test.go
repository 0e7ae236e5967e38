package soak

import (
	"strings"
	"testing"
	"time"
)

// Run refuses a configuration it cannot run, naming what is wrong.
func TestConfigCheck(t *testing.T) {
	ok := Default(300)
	if err := ok.check(); err != nil {
		t.Fatalf("Default(300): %v", err)
	}
	reversed := Default(300)
	reversed.KillEvery = [2]time.Duration{6 * time.Second, 2 * time.Second}
	for name, c := range map[string]struct {
		cfg  Config
		want string
	}{
		"zero":                {Config{}, "Events"},
		"no events":           {Default(0), "Events"},
		"kill bounds swapped": {reversed, "KillEvery"},
		"no template":         {func() Config { c := Default(10); c.Template = ""; return c }(), "Default"},
	} {
		if err := c.cfg.check(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: check() = %v; want an error naming %s", name, err, c.want)
		}
	}
}
