package ignored

func Ignored() {}
