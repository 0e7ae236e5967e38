//go:build race

package sqsbatch_test

const raceEnabled = true
