// Package outside is a module that uses oncely as a stranger would: from
// its published packages only, with a store of its own (mapstore).
package outside

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/driver"
)

// Message is this module's own event: a queue message with an order in it.
type Message struct {
	ID   string
	Body []byte
}

type order struct {
	OrderID string `json:"order_id"`
	Cents   int    `json:"cents"`
}

// Handler charges each order once. A message that cannot be an event (not
// JSON, no valid key) is noted in the poison recorder and acknowledged:
// retrying it would fail the same way.
type Handler struct {
	Engine *oncely.Engine
	Poison driver.PoisonRecorder
	Charge func(ctx context.Context, cents int) (string, error)
	Now    func() time.Time
}

// Handle returns nil when the message may be acknowledged.
func (h *Handler) Handle(ctx context.Context, m Message) error {
	var o order
	if err := json.Unmarshal(m.Body, &o); err != nil {
		return h.poison(ctx, m, driver.CodeInvalidPayload, "the body is not a JSON order")
	}
	key, err := oncely.Key("order", o.OrderID, "charge")
	if err != nil {
		return h.poison(ctx, m, driver.CodeInvalidKey, "the order id does not make a key")
	}
	_, err = oncely.Do(ctx, h.Engine, key, o, func(ctx context.Context) (string, error) { return h.Charge(ctx, o.Cents) })
	return err
}

// poison stores the note before the message is acknowledged: a digest of
// the body, never the body.
func (h *Handler) poison(ctx context.Context, m Message, reason driver.Code, detail string) error {
	sum := sha256.Sum256(m.Body)
	now := h.Now()
	return h.Poison.RecordPoison(ctx, driver.Poison{ID: m.ID, Reason: reason, Detail: detail,
		BodySHA256: hex.EncodeToString(sum[:]), BodySize: len(m.Body), At: now, ExpiresAt: now.Add(24 * time.Hour)})
}
