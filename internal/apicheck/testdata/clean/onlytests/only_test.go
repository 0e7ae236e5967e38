package onlytests

import "testing"

func TestNothing(t *testing.T) {}
