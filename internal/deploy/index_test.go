package deploy

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncely/oncely/internal/ddbstore"
	"github.com/oncely/oncely/internal/idem"
	"github.com/oncely/oncely/internal/testing/ddblocal"
)

// checkIndexedWrites runs each write the function makes against a real
// (in-process) DynamoDB server and checks which items carry the key of the
// template's triage index, by the attribute names the template declares:
// failures and poison notes do; reservations, take-overs and completions
// never do, so no success ever costs an index write.
func checkIndexedWrites(t *testing.T, tpl template, table string) {
	var keyAttrs []string
	for _, gsi := range items(get(tpl.props(table), "GlobalSecondaryIndexes")) {
		if str(get(gsi, "IndexName")) == ddbstore.IndexTriage {
			for _, k := range items(get(gsi, "KeySchema")) {
				keyAttrs = append(keyAttrs, str(get(k, "AttributeName")))
			}
		}
	}
	if len(keyAttrs) == 0 {
		t.Fatalf("the template has no %s index", ddbstore.IndexTriage)
	}
	_, ep := ddblocal.Minidyn(t)
	client, _ := ddblocal.Client(ddblocal.Config(ep, nil))
	name := ddblocal.NewTable(t, client)
	store, err := ddbstore.New(client, name, "fn")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.UnixMilli(time.Now().UnixMilli())
	indexed := func(pk string) bool {
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: &name, ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}}})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, a := range keyAttrs {
			if _, ok := out.Item[a]; ok {
				n++
			}
		}
		if n != 0 && n != len(keyAttrs) {
			t.Errorf("%s carries %d of the index key attributes %v, want all or none", pk, n, keyAttrs)
		}
		return n == len(keyAttrs)
	}
	res := func(key, token string) idem.Reservation {
		return idem.Reservation{Key: key, Fingerprint: strings.Repeat("a", 64), Token: token, Now: now, LeaseUntil: now, ExpiresAt: now.Add(time.Hour)}
	}
	steps := []struct {
		write string
		do    func() (pk string)
		want  bool
	}{
		{"Reserve", func() string {
			if _, ok, err := store.Reserve(ctx, res("evt:ix-1:notify", "t1")); err != nil || !ok {
				t.Fatal(ok, err)
			}
			return "fn#evt:ix-1:notify"
		}, false},
		{"Fail", func() string {
			if err := store.Fail(ctx, idem.Finish{Key: "evt:ix-1:notify", Token: "t1", Now: now, Attempts: 1, ExpiresAt: now.Add(time.Hour), ErrorCode: "HTTP_422", Retryable: true}); err != nil {
				t.Fatal(err)
			}
			return "fn#evt:ix-1:notify"
		}, true},
		{"TakeOver", func() string {
			prev, _, _ := store.Get(ctx, "evt:ix-1:notify", now)
			if _, ok, err := store.TakeOver(ctx, prev, res("evt:ix-1:notify", "t2")); err != nil || !ok {
				t.Fatal(ok, err)
			}
			return "fn#evt:ix-1:notify"
		}, false},
		{"Complete", func() string {
			if err := store.Complete(ctx, idem.Finish{Key: "evt:ix-1:notify", Token: "t2", Now: now, Attempts: 2, ExpiresAt: now.Add(time.Hour), Result: []byte(`1`)}); err != nil {
				t.Fatal(err)
			}
			return "fn#evt:ix-1:notify"
		}, false},
		{"RecordPoison", func() string {
			if err := store.RecordPoison(ctx, idem.Poison{ID: "m-1", Reason: idem.CodeNotJSON, At: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			return "fn#poison#m-1"
		}, true},
	}
	for _, s := range steps {
		if got := indexed(s.do()); got != s.want {
			t.Errorf("after %s: in the index got %v, want %v", s.write, got, s.want)
		}
	}
}
