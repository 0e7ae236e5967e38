package scratch

func Scratch() {}
