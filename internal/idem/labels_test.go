package idem_test

import (
	"testing"

	"github.com/oncely/oncely/internal/idem"
)

func TestOutcomeLabels(t *testing.T) {
	tests := []struct {
		out  idem.Outcome
		want idem.Label
		ack  bool
	}{
		{idem.Outcome{Stored: true}, idem.LabelExecuted, true},
		{idem.Outcome{Stored: true, Replayed: true}, idem.LabelReplayed, true},
		{idem.Outcome{Stored: true, Err: &idem.Error{Code: "HTTP_404"}}, idem.LabelPermanent, true},
		{idem.Outcome{Stored: true, Err: &idem.Error{Code: idem.CodeRetryExhausted}}, idem.LabelRetryExhausted, true},
		{idem.Outcome{Stored: true, Replayed: true, Err: &idem.Error{Code: idem.CodeRetryExhausted}}, idem.LabelPermanent, true},
		{idem.Outcome{Err: &idem.Error{Code: idem.CodeInProgress}}, idem.LabelInProgress, false},
		{idem.Outcome{Err: &idem.Error{Code: idem.CodeLeaseLost}}, idem.LabelLeaseLost, false},
		{idem.Outcome{Err: &idem.Error{Code: idem.CodeStoreUnavailable}}, idem.LabelStoreError, false},
		{idem.Outcome{Err: &idem.Error{Code: idem.CodeStoreMisconfigured}}, idem.LabelStoreRefused, false},
		{idem.Outcome{Err: &idem.Error{Code: idem.CodeDeadline}}, idem.LabelSkipped, false},
		{idem.Outcome{Err: &idem.Error{Code: idem.CodeTransientFailure}}, idem.LabelTransient, false},
		{idem.Outcome{Err: &idem.Error{Code: idem.CodeKeyReused}}, idem.LabelPoison, true},
	}
	for _, tt := range tests {
		if got := tt.out.Label(); got != tt.want || got.Acknowledged() != tt.ack {
			t.Errorf("%+v: label %s (ack %v); want %s (ack %v)", tt.out, got, got.Acknowledged(), tt.want, tt.ack)
		}
	}
	seen := map[idem.Label]bool{}
	for _, l := range idem.Labels {
		if seen[l] {
			t.Errorf("label %s listed twice", l)
		}
		seen[l] = true
	}
	for _, tt := range tests {
		if !seen[tt.want] {
			t.Errorf("label %s is not in Labels", tt.want)
		}
	}
}
