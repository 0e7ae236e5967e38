// Package shape is the fixture's second public package.
package shape

// Shape has an area.
type Shape interface {
	Area() float64
}

// Circle is a Shape.
type Circle struct {
	R float64
}

func (c Circle) Area() float64 { return 3 * c.R * c.R }

// Scale is the declaration apicheck's test changes.
func Scale(s Shape, k float64) Shape { return s }
