// Package opsctl is oncelyctl, the operator's tool for a function's
// idempotency records: get one record and explain it, list failed, stuck
// or poisoned events, count them, release failed events so that their next
// delivery runs again, and forget records. It reads and writes through
// ddbstore.Admin, the function's own store code, so it never encodes the
// record format a second time.
//
// It promises scripts a stable interface: --json output that decodes into
// the types of this package and encodes back byte for byte, and exit codes
// (ExitOK, ExitError, ExitUsage, ExitRefused, ExitNotFound). Every write is
// logged to stderr with who (the STS caller identity) and why (--reason),
// and leaves an audit entry on the record.
package opsctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
)

// Exit codes.
const (
	ExitOK       = 0 // done
	ExitError    = 1 // an error: AWS, the table, credentials
	ExitUsage    = 2 // bad flags or arguments, a malformed key
	ExitRefused  = 3 // a condition refused a write: a live lease, a record changed since it was read, a SUCCEEDED record
	ExitNotFound = 4 // no such record
)

// Env is what a run of the tool uses from its process. main fills it from
// the real process; tests give their own.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	Now            func() time.Time
	// AWS loads the SDK configuration for a profile and a region (empty:
	// the SDK's usual sources). LoadAWS is the real one.
	AWS func(ctx context.Context, profile, region string) (aws.Config, error)
	// NewToken returns a fresh fencing token for a release or a forget. Nil:
	// idem.NewToken.
	NewToken func() string
}

// LoadAWS loads the standard AWS configuration: profile, region,
// credentials and AWS_ENDPOINT_URL_<SERVICE>, as the AWS CLI does.
func LoadAWS(ctx context.Context, profile, region string) (aws.Config, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if profile != "" {
		opts = append(opts, awsconfig.WithSharedConfigProfile(profile))
	}
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	return awsconfig.LoadDefaultConfig(ctx, opts...)
}

// exitError carries an exit code with its one-line message.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &exitError{code: ExitUsage, msg: fmt.Sprintf(format, args...)}
}

type command struct {
	name, args, summary string
	run                 func(r *runner, ctx context.Context, args []string) error
}

var commands = []command{
	{"get", "KEY | --id ID --action ACTION | --api-key KEY [--caller SCOPE] | --body FILE | --source S --delivery-id ID | --source S --body FILE", "one record, decoded and explained", (*runner).get},
	{"list", "[--status STATE] [--code CODE] [--since T] [--until T] [--limit N] [--cursor C] [--scan] | --poison [--reason R] ...", "records or poison notes, newest first, with what the listing cost", (*runner).list},
	{"stats", "[--since T] [--until T] [--scan]", "counts by status, state and code over a window", (*runner).stats},
	{"release", "KEY... | --id ID --action ACTION | --stdin  [--reason TEXT] [--force --reason TEXT] [--may-repeat-side-effect --reason TEXT] [--dry-run]", "make failed (or abandoned) events run again at their next delivery; an OUTCOME_UNKNOWN one only with --may-repeat-side-effect", (*runner).release},
	{"forget", "KEY... | --id ID --action ACTION | --stdin  --reason TEXT [--rerun-succeeded] [--may-repeat-side-effect] [--dry-run]", "delete records, leaving a note of who and why; a SUCCEEDED one only with --rerun-succeeded, an OUTCOME_UNKNOWN one only with --may-repeat-side-effect", (*runner).forget},
	{"config", "", "say which table, namespace, key and payload expressions would be used, and where each comes from", (*runner).config},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: oncelyctl COMMAND [flags]")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
		if c.args != "" {
			fmt.Fprintf(w, "           %s\n", c.args)
		}
	}
	fmt.Fprintln(w, `
A record's state, in the STATE column, the JSON and list --status alike:
running or abandoned (IN_PROGRESS, lease live or ended), succeeded,
permanent, retryable or released (FAILED); --status also takes in_progress,
failed (the default) and all.

Every command takes --table, --namespace, --key-expr, --payload-expr
(default: the function's IDEMPOTENCY_TABLE, IDEMPOTENCY_NAMESPACE,
IDEMPOTENCY_KEY_JMESPATH, IDEMPOTENCY_PAYLOAD_JMESPATH), --profile, --region
and --json. Nothing after "--" is a flag. Exit codes: 0 ok, 1 error, 2 usage,
3 refused by a condition, 4 not found. "oncelyctl COMMAND -h" lists a
command's flags.`)
}

// Run runs oncelyctl with args (without the program name) and returns the
// exit code. Errors are one line on stderr.
func Run(ctx context.Context, args []string, env Env) int {
	if env.Now == nil {
		env.Now = time.Now
	}
	if env.Getenv == nil {
		env.Getenv = func(string) string { return "" }
	}
	if len(args) == 0 {
		usage(env.Stderr) // a mistake: the usage is the error
		return ExitUsage
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(env.Stdout) // asked for: output, so that oncelyctl --help | less works
		return ExitOK
	}
	var cmd *command
	for i := range commands {
		if commands[i].name == args[0] {
			cmd = &commands[i]
		}
	}
	if cmd == nil {
		fmt.Fprintf(env.Stderr, "oncelyctl: unknown command %q; commands: %s\n", args[0], commandNames())
		return ExitUsage
	}
	r := &runner{env: env, cmd: cmd.name, args: cmd.args, summary: cmd.summary, log: slog.New(slog.NewTextHandler(env.Stderr, nil))}
	err := cmd.run(r, ctx, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err == nil {
		return r.exit
	}
	code := ExitError
	if e, ok := errors.AsType[*exitError](err); ok {
		code = e.code
	}
	fmt.Fprintf(env.Stderr, "oncelyctl %s: %s\n", cmd.name, oneLine(err.Error()))
	return code
}

func commandNames() string {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// oneLine keeps an error to one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
