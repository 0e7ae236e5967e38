// Command gen is a main package outside cmd/: not recorded.
package main

func Exported() {}

func main() {}
