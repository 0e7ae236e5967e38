//go:build race

package canonjson

const raceEnabled = true
