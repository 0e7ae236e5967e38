package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/oncely/oncely/internal/config"
	"github.com/oncely/oncely/keyexpr"
)

// The stack's names: what the template would call them in a stack named
// "oncely" (the namespace is "${AWS::StackName}-notify").
const (
	defaultTable     = "oncely-records"
	defaultNamespace = "oncely-notify"
)

// stackDefaults are the function's variables the stack sets unless the
// operator sets them: the template's names, a short downstream timeout, no
// visibility changes (there is no queue: a delivery is an invoke) and no
// signing (there is no secret).
var stackDefaults = map[string]string{
	config.EnvTable:          defaultTable,
	config.EnvNamespace:      defaultNamespace,
	config.EnvKeyJMESPath:    keyexpr.DefaultExpression,
	config.EnvNotifyTimeout:  "5s",
	config.EnvQueueBackoff:   "off",
	config.EnvWebhookSigning: "off",
}

// Where a variable's value came from.
const (
	fromStack = "the stack's default"
	fromEnv   = "your environment"
	fromFile  = "the env file"
	fromFake  = "the stack's fake downstream"
)

// setting is one variable the function runs with.
type setting struct {
	Name, Value, Source string
	Note                string // what was replaced or ignored, if anything
}

// functionEnv decides the function's variables: the stack's defaults, then
// the function's variables set in the environment (getenv), then those in
// the env file (file; nil: none), which wins as the more deliberate of the
// two. DOWNSTREAM_URL is always the fake downstream's (webhook): the
// stack's deliveries go there. Names the function does not read are
// ignored, and said so (SAM's env.json holds endpoints the stack sets
// itself); a retired name is passed on, so that the function refuses it
// as it would deployed.
func functionEnv(getenv func(string) string, file map[string]string, webhook string) (settings []setting, ignored []string) {
	known := slices.Concat(config.Variables, slices.Sorted(maps.Keys(config.Retired)))
	vals := map[string]setting{}
	for name, v := range stackDefaults {
		vals[name] = setting{Name: name, Value: v, Source: fromStack}
	}
	for _, name := range known {
		if v := getenv(name); v != "" {
			vals[name] = setting{Name: name, Value: v, Source: fromEnv}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(file)) {
		switch {
		case slices.Contains(known, name) && file[name] != "":
			vals[name] = setting{Name: name, Value: file[name], Source: fromFile}
		case slices.Contains(known, name):
			// SAM's env.json writes "" for a variable it leaves unset.
			delete(vals, name)
		default:
			ignored = append(ignored, name)
		}
	}
	// Deliveries go to the fake downstream, whatever URL (or secret
	// holding one) the operator gave; a URL may hold a credential, so only
	// its scheme and host are printed.
	down := setting{Name: config.EnvDownstreamURL, Value: webhook, Source: fromFake}
	var unused []string
	if prev, ok := vals[config.EnvDownstreamURL]; ok && prev.Value != webhook {
		unused = append(unused, fmt.Sprintf("%s from %s", schemeAndHost(prev.Value), prev.Source))
	}
	if prev, ok := vals[config.EnvDownstreamURLSecret]; ok {
		unused = append(unused, fmt.Sprintf("%s %s from %s", prev.Name, prev.Value, prev.Source))
		delete(vals, config.EnvDownstreamURLSecret)
	}
	if len(unused) > 0 {
		down.Note = strings.Join(unused, " and ") + " not used"
	}
	vals[config.EnvDownstreamURL] = down
	for _, name := range known {
		if s, ok := vals[name]; ok {
			settings = append(settings, s)
		}
	}
	return settings, ignored
}

// schemeAndHost is a URL as it may be printed.
func schemeAndHost(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "a value that is not a URL"
	}
	return u.Scheme + "://" + u.Host
}

// environ turns settings into NAME=value entries.
func environ(settings []setting) []string {
	var env []string
	for _, s := range settings {
		env = append(env, s.Name+"="+s.Value)
	}
	return env
}

// lookup returns a getenv over settings.
func lookup(settings []setting, extra map[string]string) func(string) string {
	return func(name string) string {
		for _, s := range settings {
			if s.Name == name {
				return s.Value
			}
		}
		return extra[name]
	}
}

// readEnvFile reads the function's variables from path: SAM's env.json
// shape (the file `sam local invoke --env-vars` takes: "Parameters" for
// every function, overridden by the stack's function's own entry,
// QueueFunction, or NotifyFunction in files of the one-function template,
// or the file's only entry), or lines of NAME=value (blank lines and #
// comments skipped, an "export " prefix and quotes around the value
// allowed), as a shell would source them.
func readEnvFile(path string) (map[string]string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if trimmed := strings.TrimSpace(string(data)); strings.HasPrefix(trimmed, "{") {
		var byFunction map[string]map[string]any
		if err := json.Unmarshal(data, &byFunction); err != nil {
			return nil, fmt.Errorf("%s: not SAM's env.json shape ({\"QueueFunction\": {\"NAME\": \"value\"}}): %v", path, err)
		}
		var entries []string
		for _, name := range []string{"Parameters", "QueueFunction", "NotifyFunction"} {
			if _, ok := byFunction[name]; ok {
				entries = append(entries, name)
			}
		}
		if len(entries) == 0 && len(byFunction) == 1 {
			entries = slices.Collect(maps.Keys(byFunction))
		}
		if len(entries) == 0 {
			return nil, fmt.Errorf("%s: no Parameters or QueueFunction entry (it has %s)", path, strings.Join(slices.Sorted(maps.Keys(byFunction)), ", "))
		}
		out := map[string]string{}
		for _, entry := range entries {
			for name, v := range byFunction[entry] {
				switch v := v.(type) {
				case string:
					out[name] = v
				case float64, bool:
					out[name] = fmt.Sprint(v)
				default:
					return nil, fmt.Errorf("%s: %s.%s is %T; want a string", path, entry, name, v)
				}
			}
		}
		return out, nil
	}
	out := map[string]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(strings.TrimPrefix(line, "export "), "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" || strings.ContainsAny(name, " \t\"'") {
			return nil, fmt.Errorf("%s:%d: want NAME=value, got %q", path, i+1, line)
		}
		value = strings.TrimSpace(value)
		if len(value) >= 2 && (value[0] == '"' || value[0] == '\'') && value[len(value)-1] == value[0] {
			value = value[1 : len(value)-1]
		}
		out[name] = value
	}
	return out, nil
}
