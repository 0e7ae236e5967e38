package main

// Exported is in a command: not recorded.
func Exported() {}

func main() {}
