package ddbstore

import (
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// What DynamoDB charges, by its published rules (the developer guide's
// "Item sizes and formats" and "read and write operations"): an item's size
// is the sum of its attribute names' and values' sizes; a write consumes
// one write unit per started kilobyte of the larger of the item before and
// after it (a failed conditional write included, which is why a replay's
// reservation is charged by the stored record's size), a strongly
// consistent read one read unit per started 4 KB. Local servers do not
// report consumed capacity (moto answers a constant), so the benchmarks and
// the size tests compute it with these functions.
const (
	WriteUnitBytes = 1024
	ReadUnitBytes  = 4096
)

// ItemSize returns an item's size as DynamoDB counts it: attribute names
// in UTF-8 bytes, strings in UTF-8 bytes, binaries in raw bytes, numbers
// at one byte per two significant digits plus one, booleans and nulls one
// byte, lists and maps three bytes plus their elements, one byte each.
func ItemSize(item map[string]types.AttributeValue) int {
	n := 0
	for name, v := range item {
		n += len(name) + attrSize(v)
	}
	return n
}

func attrSize(v types.AttributeValue) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberSize(v.Value)
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberBOOL, *types.AttributeValueMemberNULL:
		return 1
	case *types.AttributeValueMemberSS:
		return sumLen(v.Value)
	case *types.AttributeValueMemberBS:
		return sumLen(v.Value)
	case *types.AttributeValueMemberNS:
		n := 0
		for _, s := range v.Value {
			n += numberSize(s)
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += attrSize(e) + 1
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for name, e := range v.Value {
			n += len(name) + attrSize(e) + 1
		}
		return n
	}
	return 0
}

// numberSize is one byte per two significant digits (leading and trailing
// zeros trimmed), plus one.
func numberSize(s string) int {
	mantissa, _, _ := strings.Cut(strings.ToLower(s), "e")
	digits := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, mantissa)
	digits = strings.Trim(digits, "0")
	return (utf8.RuneCountInString(digits)+1)/2 + 1
}

// WriteUnits is what a write of an item of size bytes consumes: one unit
// per started kilobyte, at least one. Pass the larger of the item before
// and after the write.
func WriteUnits(size int) int { return max(1, (size+WriteUnitBytes-1)/WriteUnitBytes) }

// ReadUnits is what a strongly consistent read of an item of size bytes
// consumes: one unit per started 4 KB, at least one.
func ReadUnits(size int) int { return max(1, (size+ReadUnitBytes-1)/ReadUnitBytes) }
