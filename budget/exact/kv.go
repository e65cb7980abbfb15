package exact

// Reading model_info's values as /api/show's JSON gives them.

func strings_(v any) []string {
	a, _ := v.([]any)
	out := make([]string, 0, len(a))
	for _, x := range a {
		s, _ := x.(string)
		out = append(out, s)
	}
	return out
}

func ints(v any) []int32 {
	a, _ := v.([]any)
	out := make([]int32, 0, len(a))
	for _, x := range a {
		n, _ := number(x)
		out = append(out, int32(n))
	}
	return out
}

func floats(v any) []float32 {
	a, _ := v.([]any)
	out := make([]float32, 0, len(a))
	for _, x := range a {
		f, _ := x.(float64)
		out = append(out, float32(f))
	}
	return out
}

func number(v any) (int, bool) {
	f, ok := v.(float64)
	if !ok || f != float64(int(f)) {
		return 0, false
	}
	return int(f), true
}

func boolOr(v any, def bool) bool {
	if b, ok := v.(bool); ok {
		return b
	}
	return def
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
