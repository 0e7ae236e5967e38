package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/oncely/oncely"
	"github.com/oncely/oncely/dynamostore"
)

// A function's wiring: the store on its table, checked once at init, and
// the engine on it. It needs AWS credentials and a table, so it has no
// output to compare.
func Example() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// The namespace names what the function does, not the function: a
	// rename must not re-key its records.
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), "orders-idempotency", dynamostore.Options{Namespace: "orders"})
	if err != nil {
		log.Fatal(err)
	}
	// A missing table or permission fails the init; an outage only warns.
	if err := store.Check(ctx); oncely.Classify(err) == oncely.ClassPermanent {
		log.Fatal(err)
	} else if err != nil {
		log.Printf("the idempotency table could not be checked; starting anyway: %v", err)
	}
	engine, err := oncely.New(store, oncely.Options{})
	if err != nil {
		log.Fatal(err)
	}
	key, _ := oncely.Key("order", "7", "charge")
	receipt, err := oncely.Do(ctx, engine, key, map[string]string{"amount": "12.50"}, func(ctx context.Context) (string, error) {
		return "rcpt-7", nil // the side effect runs once; a retry gets the stored receipt
	})
	fmt.Println(receipt, err)
}

// Without a namespace there is no store: it has no default.
func ExampleNew() {
	_, err := dynamostore.New(dynamodb.New(dynamodb.Options{}), "orders-idempotency", dynamostore.Options{})
	fmt.Println(err)
	// Output: dynamostore: Options.Namespace is required: it prefixes every stored key; choose a name that outlives the function's (a rename would re-key every record)
}

// What the function's role needs on the table, for a template or a
// policy built in code.
func ExampleRequiredIAMActions() {
	for _, action := range dynamostore.RequiredIAMActions() {
		fmt.Println(action)
	}
	// Output:
	// dynamodb:GetItem
	// dynamodb:PutItem
	// dynamodb:UpdateItem
}

// An action's own DynamoDB writes, committed with the record's completion
// in one transaction: either both happen or neither does. (Engine.Run
// takes Work that returns them; it needs a table, so it has no output.)
func ExampleEffects() {
	var engine *oncely.Engine // oncely.New(store, ...) on a dynamostore.Store
	req, err := oncely.NewRequest("evt:order-7:ledger", []byte(`{"amount":"12.50"}`))
	if err != nil {
		log.Fatal(err)
	}
	out := engine.Run(context.Background(), req, func(ctx context.Context) ([]byte, oncely.Effects, error) {
		entry := dynamostore.Effects{{Put: &types.Put{
			TableName:           aws.String("ledger"),
			Item:                map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "order-7"}},
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}}}
		return []byte(`{"entry":"order-7"}`), entry, nil
	})
	if out.Err != nil && errors.Is(out.Err, oncely.ErrKeyReused) {
		log.Print("the key came back with another payload")
	}
}
