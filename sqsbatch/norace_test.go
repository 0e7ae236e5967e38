//go:build !race

package sqsbatch_test

const raceEnabled = false
